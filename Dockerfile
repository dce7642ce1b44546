# The example voice bot (examples/voice_bot.py) on Pipecat's development runner, OpenAI mode.
#   docker build -t pipecat-summarizer-bot .
#   docker run --rm -p 7860:7860 --env-file .env pipecat-summarizer-bot
# then open http://localhost:7860 (the bot's own page; see examples/README.md for WebRTC networking).
#
# Local mode (BOT_MODE=local: Whisper, Piper and a local LLM server) is NOT in this image: it
# installs the [example] extra only, not [local], and ships no speech or language model. Run
# local mode on the host (examples/README.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin bot

WORKDIR /app

# Layer 1, the dependencies: only pyproject.toml is copied, so this layer is rebuilt when the
# dependencies change, not on every source edit. The list is read from pyproject.toml (the
# package's dependencies plus the [example] extra: pipecat-ai[openai,webrtc,silero,runner] and
# python-dotenv), so it is declared in one place. The compiled dependencies (aiortc, av,
# onnxruntime, numpy...) all ship manylinux wheels: no apt packages or compiler needed.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['example']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Layer 2, the source and the package itself (its dependencies are installed above).
# .dockerignore keeps .env, memory stores (*.db, *.sqlite*), .venv, .git and tests out.
COPY . .
RUN pip install --no-cache-dir --no-deps .

USER 10001

EXPOSE 7860

# Bind to all interfaces so the published port reaches the runner inside the container.
CMD ["python", "examples/voice_bot.py", "-t", "webrtc", "--host", "0.0.0.0", "--port", "7860"]
