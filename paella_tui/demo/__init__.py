"""The built-in demo of ``paella demo``: a small project, its contract, and a scripted agent.

``scenario.py`` builds the demo repository; ``project/`` holds its files as the run starts;
``agent.py`` is the scripted agent, and ``edits/`` the versions of the files it writes.
"""
