/* Minimal pod sandbox ("pause") process, built locally because no registry
 * is reachable. Holds the pod's namespaces, reaps zombies, exits on
 * SIGINT/SIGTERM. Same behaviour as the upstream kubernetes pause. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void sigdown(int signo) {
	psignal(signo, "Shutting down, got signal");
	exit(0);
}

static void sigreap(int signo) {
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		printf("harness pause\n");
		return 0;
	}
	if (getpid() != 1)
		fprintf(stderr, "Warning: pause should be the first process\n");
	struct sigaction down = {.sa_handler = sigdown};
	struct sigaction reap = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGINT, &down, NULL) < 0 || sigaction(SIGTERM, &down, NULL) < 0 ||
	    sigaction(SIGCHLD, &reap, NULL) < 0)
		return 1;
	for (;;)
		pause();
	return 42;
}
