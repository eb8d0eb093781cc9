"""XTC policing service: the global view over many hosts (REST API, policies, SQLite state)."""
