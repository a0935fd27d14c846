"""The ``gpusim`` command (:mod:`.commands`): a thin layer over the Python API, imported by nothing."""
