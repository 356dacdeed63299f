"""Every process the tests start (xdist workers, nbval's kernels, the browser tier's JupyterLab)
runs with the environment the stored notebook outputs were made with: one torch thread."""
import os

from labkit.nbbuild import TEST_ENV

os.environ.update(TEST_ENV)
