"""The browser tier's one JupyterLab and Chromium per pytest worker (see browser_tier.py)."""
import pytest
from browser_tier import lab_session

lab = pytest.fixture(scope="session")(lab_session)
