"""The example tutor: the agent, one chat turn, fitting the model's context, the grounded reply and its checks,
the served turn (the terminal chat is ``hyde-tutor chat`` in ``cli/chat.py``; the web page is ``server/``)."""
