"""The database roles the indexer creates, named once for the migrations and the embedded cluster."""

READER_ROLE = "indexer_reader"  # may read schema api (and run fn) and nothing else; granted by the migrations
