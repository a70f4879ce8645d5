"""Runs a command with stdin, stdout and stderr on a pseudo-terminal and
prints what it wrote, carriage returns as <CR> and erase-line (ESC [K) as
<EL>, so a test can check a line redrawn in place. Exits with the command's
exit code.

  run_in_pty.py CMD [ARGS...]
"""
import os
import pty
import sys

pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # EIO: the child closed the terminal
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
# The terminal turns \n into \r\n; keep the program's own \r visible.
text = out.decode("utf-8", "replace").replace("\r\n", "\n")
text = text.replace("\r", "<CR>").replace("\x1b[K", "<EL>")
sys.stdout.write(text)
sys.exit(os.waitstatus_to_exitcode(status))
