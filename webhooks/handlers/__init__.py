"""One handler per kind of review: the job kinds (generic and batch/v1 Job), pods, quota objects."""
