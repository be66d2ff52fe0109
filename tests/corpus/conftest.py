"""The service's and the API's fixtures (tests/service_fixtures.py, tests/api_fixtures.py)
for the corpus tests that run through a worker and the HTTP API."""

from tests.api_fixtures import *  # noqa: F403
from tests.service_fixtures import *  # noqa: F403
