# lesson: 1
# expect: still raises NotImplementedError
# expect: l01_projections/ (a package named like a lesson) is ignored: only l01_projections.py is graded
# ---- l01_projections/__init__.py
<solution of l01_projections.py>
