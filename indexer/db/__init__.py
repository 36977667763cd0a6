"""Database access: URL resolution, embedded server, engines, migrations."""
