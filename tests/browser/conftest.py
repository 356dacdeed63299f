"""The browser tier's one Chromium and one JupyterLab per pytest worker (see browser_tier.py)."""
import pytest
from browser_tier import browser_session, lab_session

browser = pytest.fixture(scope="session")(browser_session)
lab = pytest.fixture(scope="session")(lab_session)
