# lesson: 1
# expect: still raises NotImplementedError
# ---- pytest.ini
[pytest]
addopts = -k "not test_" --deselect tests -p no:python --co -x
python_files = nothing_matches_*.py
python_classes = Nothing
python_functions = nothing
xfail_strict = false
required_plugins = a-plugin-that-does-not-exist
# ---- l01_projections.py
def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
