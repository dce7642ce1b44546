# The example voice bot (examples/voice_bot.py) on Pipecat's development runner.
#   docker build -t pipecat-summarizer-bot .
#   docker run --rm -p 7860:7860 --env-file .env pipecat-summarizer-bot
# then open http://localhost:7860/client (see examples/README.md for WebRTC networking).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin bot

WORKDIR /app

# The package (this directory, "./") with the example extras:
# pipecat-ai[openai,webrtc,silero,runner] and python-dotenv. The compiled dependencies
# (aiortc, av, onnxruntime, numpy...) all ship manylinux wheels, so no apt packages or
# compiler are needed; .dockerignore keeps .env, .venv, .git and tests out of the image.
COPY . .
RUN pip install --no-cache-dir "./[example]"

USER 10001

EXPOSE 7860

# Bind to all interfaces so the published port reaches the runner inside the container.
CMD ["python", "examples/voice_bot.py", "-t", "webrtc", "--host", "0.0.0.0", "--port", "7860"]
