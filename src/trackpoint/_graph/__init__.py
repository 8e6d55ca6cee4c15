"""Live objects ↔ ``TrackableObjectGraph``: node ids, paths, keys, saving order, matching on restore."""
