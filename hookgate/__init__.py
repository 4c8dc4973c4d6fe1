"""Hookgate runtime core: settings, database access, migrations, embedded PostgreSQL, crypto."""
