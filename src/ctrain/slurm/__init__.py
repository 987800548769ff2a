"""sbatch job scripts rendered from the templates in jobs/."""
