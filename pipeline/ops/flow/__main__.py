"""`python -m pipeline.ops.flow`: the flow's command line (`pipeline.ops.flow.cli`)."""

from pipeline.ops.flow.cli import main

main()
