"""runtime stage of the Cherenkov pipeline."""
