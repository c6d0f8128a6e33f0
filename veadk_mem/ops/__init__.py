"""Jobs that span both stores: forget, doctor, replay from the session database.

The session store and long-term memory never import each other; what needs both lives here,
above them and below the CLI (tests/test_import_graph.py holds the order).
"""
