"""``python -m gangq.operator run ...`` (the same as ``gangq run``)."""

from gangq.operator.cli import app

app()
