"""The session side: the synchronous owner of the shared context and the processor's store hooks.

Internal: nothing here is public API (see ``pipecat_summarizer.__all__``).
"""
