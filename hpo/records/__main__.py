"""`python -m hpo.records` prints the docs' list of trial record keys, generated from the schema."""

import sys

from hpo.records import readme_list

sys.stdout.write(readme_list() + "\n")
