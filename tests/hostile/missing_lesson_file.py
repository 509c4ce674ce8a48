# lesson: 1
# expect: l01_projections.py is missing
# expect: course reset 1
# ---- l01_projections.py
<delete>
