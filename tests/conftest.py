import pytest_asyncio

from tests.openai_server import FakeOpenAIServer


@pytest_asyncio.fixture
async def openai_server():
    server = FakeOpenAIServer()
    await server.start()
    yield server
    await server.stop()
