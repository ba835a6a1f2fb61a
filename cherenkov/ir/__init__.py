"""ir stage of the Cherenkov pipeline."""
