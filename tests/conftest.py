import pytest
import pytest_asyncio
from loguru import logger

from tests.support.openai_server import FakeOpenAIServer
from tests.support.store_fixtures import backend, pg_server, store_target  # noqa: F401


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
