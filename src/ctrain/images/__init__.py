"""Images on disk: the cache directory, pulls (the stores, their records), builds, overlays,
cache upkeep."""
