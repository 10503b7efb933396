"""``enverif runs watch``: a run tree, live, in a terminal."""
