# lesson: 3
# expect: No module named 'l02_softmax'
# expect: l02_softmax/ (a package named like a lesson) is ignored: only l02_softmax.py is graded
# ---- l02_softmax.py
<delete>
# ---- l02_softmax/__init__.py
<solution of l02_softmax.py>
# ---- l03_attention.py
<solution>
