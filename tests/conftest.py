import pytest
import pytest_asyncio
from loguru import logger
from pipecat.tests import utils as pipecat_test_utils

from tests.support import bytecode
from tests.support.openai_server import FakeOpenAIServer
from tests.support.shared_setup import share_setup
from tests.support.store_fixtures import backend, pg_server, store_target  # noqa: F401

# Pipecat's run_test gives a pipeline 1 s to start. On a loaded 2-core machine a start took
# longer: the test failed, and the loop's teardown then waited forever for the pipeline's
# runner (a hung worker hangs the whole run). Every test's pipeline gets 30 s to start.
pipecat_test_utils.run_test.__kwdefaults__["start_timeout"] = 30.0

# The CA certificates and the smart-turn model, loaded again by every pipeline: once per
# process (tests/support/shared_setup.py; about 40% of a pipeline test's CPU).
share_setup()


def pytest_configure(config):
    """Under pytest-xdist, the controller compiles the checkout once before the workers start
    (tests/support/bytecode.py): each worker would compile it all again."""
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and not hasattr(config, "workerinput"):
        bytecode.warm(config, bytecode.jobs_for(workers))


@pytest_asyncio.fixture
async def openai_server():
    server = FakeOpenAIServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def logs():
    """Loguru records emitted during the test."""
    records: list = []
    sink = logger.add(lambda m: records.append(m.record), level="DEBUG")
    yield records
    logger.remove(sink)
