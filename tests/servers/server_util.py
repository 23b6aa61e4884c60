"""What every test server here shares."""
import os
import threading
import time


def exit_with_parent():
    """Exits this process when the test that started it exits, even if the test crashed
    (a server left running would hold its port and its files)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
