# lesson: 3
# expect: l03_attention.py imports your l02_softmax.py, which is not in your workspace
# expect: l02_softmax/ (a package named like a lesson) is ignored: only l02_softmax.py is graded
# ---- l02_softmax.py
<delete>
# ---- l02_softmax/__init__.py
<solution of l02_softmax.py>
# ---- l03_attention.py
<solution>
