"""The per-warehouse catalog map shared by computing units and the result service.

warehouse id -> pyiceberg Catalog, built lazily from the registry's
CatalogBinding, reused while the binding's credential version holds, bounded
by LRU and idle expiry. See catalog_map.cache for the concurrency rules.
"""
