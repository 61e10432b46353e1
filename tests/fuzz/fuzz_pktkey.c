/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target: the steering key parser (src/manager/pktkey.c), the first code in sluiced to see
 * every packet. Input: [in_port] + the frame, held in an allocation of exactly its length (ASan: never
 * a byte past the frame). What it returns must be consistent: the payload inside the frame, the
 * flags' implications (docs/steering.md), the ingress port kept.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "pktkey.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	uint32_t len = (uint32_t)size - 1;
	uint8_t *frame = malloc(len ? len : 1);
	memcpy(frame, data + 1, len);
	struct sl_pkt_key k;
	memset(&k, 0xa5, sizeof(k));
	int rc = sl_pkt_key_parse(frame, len, data[0], &k);
	REQUIRE(rc == 0 || rc == -1);
	if (rc == 0) {
		REQUIRE(k.in_port == data[0]);
		REQUIRE((uint32_t)k.payload_off + k.payload_len <= len);
		if (k.flags & (SL_KEY_IP4 | SL_KEY_IP6 | SL_KEY_PORTS | SL_KEY_TCP | SL_KEY_FRAG))
			REQUIRE(k.flags & SL_KEY_IP);
		REQUIRE(!((k.flags & SL_KEY_IP4) && (k.flags & SL_KEY_IP6)));
		if (k.flags & SL_KEY_IP)
			REQUIRE(k.flags & (SL_KEY_IP4 | SL_KEY_IP6));
		if (k.flags & SL_KEY_NONFIRST)
			REQUIRE((k.flags & SL_KEY_FRAG) && !(k.flags & SL_KEY_PORTS));
		if (k.flags & SL_KEY_TCP)
			REQUIRE(k.proto == 6);
	}
	free(frame);
	return 0;
}
