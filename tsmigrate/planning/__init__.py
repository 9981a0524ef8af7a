"""Planning: what it takes to bring a live schema to the models, before anything is changed.

- ``ops``: plan steps as data (kind, risk, why) with the pure transform of the IR each makes;
- ``plan``: the diff of live against declared, ordered into a plan that predicts every state
  on the way (``familyplan`` plans a table family's months);
- ``drift``: the live schema against the one the last apply left;
- ``planfile``: plan files (``plan --out``) and the checks ``apply --plan`` makes on them;
- ``planrender``: a plan as text, Markdown (a pull request's comment) and JSON.
"""
