"""The shipped search spaces, one YAML file each (`arithsweep spaces` lists them).

This folder is installed as the package `arithsweep.search_spaces` (see pyproject.toml's
package-dir), so the spaces travel with a non-editable install. Copy one to start your own and
pass its path: `arithsweep search --space my_space.yaml`.
"""
