"""The `report` stage's parts, one job each: `inputs` reads the run's files, `figures` draws the PNGs
the page shows, `page` fills the Markdown template `page.md.j2`. The training curves are not drawn
here: `dvc plots show` draws them from the training log (dvc.yaml `plots:`)."""
