"""worker: filled in by a later issue (see ../shared/DESIGN.md section 1)."""
