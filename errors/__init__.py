"""The root of every error evalflow raises on purpose, in the lowest layer so that every layer can use it."""
