"""Storage backends behind one small interface (see :mod:`loopx.store.base`)."""
