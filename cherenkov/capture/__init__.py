"""capture stage of the Cherenkov pipeline."""
