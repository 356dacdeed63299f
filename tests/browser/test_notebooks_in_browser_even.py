"""The browser tier (browser_tier.py) on notebooks 00, 02, 04, ...: half of them, so that two pytest
workers can share the tier."""
import browser_tier as tier
import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("notebook", tier.NOTEBOOKS[0::2], ids=lambda p: p.stem)
def test_notebook_in_jupyterlab(lab, notebook):
    tier.check_notebook(lab, notebook)
