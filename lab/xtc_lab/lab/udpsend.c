/*
 * xtc-udpsend: a paced UDP source of small packets for the host lab.
 *
 * Sends RATE packets/s of PAYLOAD-byte UDP datagrams to DST:PORT for DURATION
 * seconds.  Every millisecond it sends, with one sendmmsg call, the packets
 * that are due by then, so it costs far less CPU per packet than a sender that
 * makes one system call per packet; on a busy 2-core host that is what lets
 * the offered rate stay steady while the VR under test uses the other core.
 * A packet that the kernel refuses (ENOBUFS) is counted as failed; when the
 * sender was starved of CPU for more than 10 ms, the packets due beyond that are
 * skipped, not sent later in a burst.
 *
 * usage: xtc-udpsend -r RATE_PPS -t DURATION_S [-l PAYLOAD_BYTES] [-p PORT] DST_IPV4
 * On exit (end of duration, SIGTERM or SIGINT) prints one JSON line on stdout:
 *   {"sent_packets": N, "failed_packets": F, "skipped_packets": K, "seconds": S}
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BATCH 1024
#define TICK_NS 1000000L

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    double rate = -1, duration = -1, payload = 64, port = 5201;
    int opt;
    while ((opt = getopt(argc, argv, "r:t:l:p:")) != -1) {
        int bad = 0;
        switch (opt) {
        case 'r': bad = parse_num(optarg, 1, 1e8, &rate); break;
        case 't': bad = parse_num(optarg, 0.001, 1e6, &duration); break;
        case 'l': bad = parse_num(optarg, 1, 1472, &payload); break;
        case 'p': bad = parse_num(optarg, 1, 65535, &port); break;
        default: bad = 1;
        }
        if (bad)
            goto usage;
    }
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (rate < 0 || duration < 0 || argc - optind != 1 || inet_pton(AF_INET, argv[optind], &dst.sin_addr) != 1)
        goto usage;

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {  /* not connected: an ICMP error from the receiver must not fail sends */
        perror("xtc-udpsend: socket");
        return 1;
    }
    static char data[1472];
    memset(data, 0x5a, sizeof data);
    static struct iovec iov = {.iov_base = data};
    iov.iov_len = (size_t)payload;
    static struct mmsghdr msgs[MAX_BATCH];
    for (int i = 0; i < MAX_BATCH; i++)
        msgs[i].msg_hdr = (struct msghdr){.msg_name = &dst, .msg_namelen = sizeof dst,
                                          .msg_iov = &iov, .msg_iovlen = 1};

    unsigned long long sent = 0, failed = 0, skipped = 0;
    const double max_due = rate * 0.010 > 1 ? rate * 0.010 : 1;  /* 10 ms worth of packets */
    const double t0 = now_s();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    double elapsed = 0;
    while (!stop_requested && (elapsed = now_s() - t0) < duration) {
        double due = rate * elapsed - (double)(sent + failed + skipped);
        if (due > max_due) {
            skipped += (unsigned long long)(due - max_due);
            due -= (double)(unsigned long long)(due - max_due);
        }
        while (due >= 1 && !stop_requested) {
            unsigned n = due > MAX_BATCH ? MAX_BATCH : (unsigned)due;
            int r = sendmmsg(fd, msgs, n, 0);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                r = 1;  /* ENOBUFS and the like: count the head packet as failed */
                failed++;
            } else {
                sent += (unsigned long long)r;
            }
            due -= r;
        }
        next.tv_nsec += TICK_NS;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    elapsed = now_s() - t0;
    printf("{\"sent_packets\": %llu, \"failed_packets\": %llu, \"skipped_packets\": %llu, \"seconds\": %.6f}\n",
           sent, failed, skipped, elapsed);
    return 0;

usage:
    fprintf(stderr, "usage: %s -r RATE_PPS -t DURATION_S [-l PAYLOAD_BYTES] [-p PORT] DST_IPV4\n", argv[0]);
    return 1;
}
