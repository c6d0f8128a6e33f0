"""Short-term memory: ADK's session tables in sqlite, PostgreSQL and MySQL."""
