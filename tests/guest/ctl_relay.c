/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-ctl-relay: inside a guest that runs sluiced itself (tests/integration/test_pci_guest.py),
 * carry the host's control requests from a virtio-serial port to sluiced's ctl.sock and the answers
 * back, so the host's `sluice` CLI and tests talk to the guest's sluiced as to a local one.
 *
 *   sluice-ctl-relay PORT_DEVICE CTL_SOCKET
 *
 * One connection to CTL_SOCKET at a time: opened when the first byte comes from the port, and again
 * after sluiced closed it. Bytes pass unchanged both ways (the control API is newline-delimited
 * JSON); sluiced's answers end in a newline, so requests never interleave. Runs until the port
 * closes. A test tool, not installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Write all of buf to fd; 0, or -1. */
static int write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: sluice-ctl-relay PORT_DEVICE CTL_SOCKET\n");
		return 2;
	}
	int port = open(argv[1], O_RDWR | O_CLOEXEC);
	if (port < 0) {
		fprintf(stderr, "sluice-ctl-relay: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	int ctl = -1;
	char buf[65536];
	for (;;) {
		struct pollfd p[2] = { { .fd = port, .events = POLLIN }, { .fd = ctl, .events = POLLIN } };
		if (poll(p, ctl >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (p[0].revents & POLLHUP) { /* no host side connected: look again shortly */
			usleep(100000);
			continue;
		}
		if (p[0].revents & POLLIN) {
			ssize_t n = read(port, buf, sizeof(buf));
			if (n <= 0)
				continue;
			if (ctl < 0 && (ctl = ctl_connect(argv[2])) < 0) {
				static const char down[] = "{\"ok\":false,\"error\":\"sluice-ctl-relay: sluiced's control "
							   "socket does not answer\"}\n";
				(void)write_all(port, down, sizeof(down) - 1);
				continue;
			}
			if (write_all(ctl, buf, (size_t)n) < 0) {
				close(ctl);
				ctl = -1;
			}
		}
		if (ctl >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(ctl, buf, sizeof(buf));
			if (n <= 0 || write_all(port, buf, (size_t)n) < 0) {
				close(ctl);
				ctl = -1;
			}
		}
	}
}
