"""The bottom layer: what every other layer may import and that imports nothing of ablate.

    registry.Registry     one registry class for every extension axis
    seeding               seed_everything, derived_seed
    locks                 file_lock, process_alive, lock_holder
    errors.ConfigError    a bad configuration value (key, value, what is allowed)
    errors.OutputWriteError  an output file not written (disk full, read-only): path, free space
"""
