"""The project's own library, imported by its experiments from the repository's root."""
