/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The process form of a library NF: its source (nfs/<name>/<name>.c) registers the NF with
 * SL_NF_PLUGIN_REGISTER, and this main() -- the SDK's -- runs it (nf_plugin.h). The same source
 * built as a shared module is the plugin form sluice-group loads.
 */
#include "sluice/nf_plugin.h"

extern const struct sl_nf_plugin sl_nf_plugin_v1;

int main(int argc, char **argv)
{
	return sl_nf_plugin_main(argc, argv, &sl_nf_plugin_v1);
}
