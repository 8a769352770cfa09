// Whether a store into a page of a mapped file can make the file system look for new space. Where it
// can (copy-on-write file systems), a full disk turns a plain store into SIGBUS in the storing thread,
// `add`, and a nearly full btrfs can hold that thread in the kernel for minutes.

#include "CTelemetrySignals.h"

#if defined(__linux__)
#include <sys/vfs.h>

// Super-block magic numbers (statfs(2), linux/magic.h; ZFS and bcachefs are not in that header).
#define TB_BTRFS_MAGIC 0x9123683Eu
#define TB_ZFS_MAGIC 0x2FC12FC1u
#define TB_BCACHEFS_MAGIC 0xCA451A4Eu

int tb_file_overwrites_in_place(int fd) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return 0;
    switch ((unsigned int)fs.f_type) {
    // btrfs reserves data space at every write fault, even for a NOCOW file whose blocks fallocate
    // reserved: seen here stuck in btrfs_page_mkwrite for 120 s on a nearly full disk.
    case TB_BTRFS_MAGIC:
    case TB_ZFS_MAGIC:
    case TB_BCACHEFS_MAGIC:
        return 0;
    default:
        return 1;
    }
}

#else

// APFS and HFS+ overwrite a file's own blocks in place; only blocks a clone or a snapshot shares are
// copied on write (the README says what that leaves).
int tb_file_overwrites_in_place(int fd) { (void)fd; return 1; }

#endif
