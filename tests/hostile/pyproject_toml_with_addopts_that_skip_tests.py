# lesson: 1
# expect: still raises NotImplementedError
# ---- pyproject.toml
[project]
name = "my-attention"
version = "0.0.1"

[tool.pytest.ini_options]
addopts = "-k 'not linear and not head and not fuse' --collect-only -p no:python --exitfirst"
python_functions = "nothing_at_all"
filterwarnings = ["error"]
# ---- l01_projections.py
def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
