"""Documents and collections: the corpus format, schemas of collections built elsewhere, payload rendering, ingest, inspection."""
