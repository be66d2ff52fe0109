"""The service's fixtures (tests/service_fixtures.py) for every test in this folder."""

from tests.service_fixtures import *  # noqa: F403
