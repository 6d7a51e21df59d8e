#include "reports/lm_papers.h"

namespace mnemo {

const std::vector<LmPaperBlock>& lm_paper_blocks() {
  static const std::vector<LmPaperBlock> blocks = {
    {"340M", "340M/15B", "340M params / 15B tokens (Titans, Miras, Atlas)", "FineWeb-Edu (Atlas rows: FineWeb)",
     "Llama-2 32K (Atlas rows: T5 32K)", 340e6, 15e9, 4096,
     "Titans Table 1, Miras Table 2, Atlas appendix table (arXiv:2501.00663, arXiv:2504.13173, arXiv:2505.23735)"},
    {"760M", "760M/30B", "760M params / 30B tokens (Titans, Miras, Atlas)", "FineWeb-Edu (Atlas rows: FineWeb)",
     "Llama-2 32K (Atlas rows: T5 32K)", 760e6, 30e9, 4096,
     "Titans Table 1, Miras Table 2, Atlas main table (arXiv:2501.00663, arXiv:2504.13173, arXiv:2505.23735)"},
    {"mom340M", "MoM 340M/15B", "340M params / 15B tokens (MoM)", "SlimPajama", "Mistral 32K", 340e6, 15e9, 2048,
     "MoM Table 3 (arXiv:2502.13685)"},
  };
  return blocks;
}

// A baseline row copied between papers is taken once, from its first source (docs/reproducing.md#rows-copied-between-papers). The
// paper's "TTT" row stands for both of mnemo's TTT variants (a tie in the paper's ranking).
const std::vector<LmPaperRow>& lm_paper_rows() {
  static const std::vector<LmPaperRow> rows = {
    // arXiv:2501.00663 Titans Table 1, block "340M params / 15B tokens"
    {"340M", "transformer", "Transformer++", "31.52", "41.08", "Titans T1"},
    {"340M", "retnet", "RetNet", "32.50", "49.73", "Titans T1"},
    {"340M", "gla", "GLA", "28.51", "43.02", "Titans T1"},
    {"340M", "deltanet", "DeltaNet", "28.65", "47.30", "Titans T1"},
    {"340M", "ttt_linear", "TTT", "27.44", "34.19", "Titans T1"},
    {"340M", "ttt_mlp", "TTT", "27.44", "34.19", "Titans T1"},
    {"340M", "gated_deltanet", "Gated DeltaNet", "27.01", "30.94", "Titans T1"},
    {"340M", "titans_lmm", "Titans (LMM)", "26.18", "29.97", "Titans T1"},
    {"340M", "titans_mac", "Titans (MAC)∗", "25.43", "28.13", "Titans T1"},
    {"340M", "titans_mag", "Titans (MAG)∗", "25.07", "28.72", "Titans T1"},
    {"340M", "titans_mal", "Titans (MAL)∗", "24.69", "28.80", "Titans T1"},
    // arXiv:2504.13173 Miras Table 2, block "340M params / 15B tokens" (its baselines = Titans')
    {"340M", "moneta", "Moneta", "26.19", "29.31", "Miras T2"},
    {"340M", "yaad", "Yaad", "26.61", "29.11", "Miras T2"},
    {"340M", "memora", "Memora", "27.16", "30.44", "Miras T2"},
    // arXiv:2505.23735 Atlas appendix table, 340M / 15B (its baselines = Titans'/Miras')
    {"340M", "dla", "DLA", "27.93", "35.09", "Atlas app."},
    {"340M", "swdt", "SWDT", "26.98", "33.95", "Atlas app."},
    {"340M", "omeganet", "OmegaNet", "26.03", "28.76", "Atlas app."},
    {"340M", "atlas", "ATLAS", "25.88", "28.54", "Atlas app."},
    // arXiv:2501.00663 Titans Table 1, block "760M params / 30B tokens" (printed without ∗ on Titans hybrids)
    {"760M", "transformer", "Transformer++", "25.21", "27.64", "Titans T1"},
    {"760M", "retnet", "RetNet", "26.08", "24.45", "Titans T1"},
    {"760M", "mamba2", "Mamba2", "22.94", "28.37", "Titans T1"},
    {"760M", "deltanet", "DeltaNet", "24.37", "24.60", "Titans T1"},
    {"760M", "ttt_linear", "TTT", "24.17", "23.51", "Titans T1"},
    {"760M", "ttt_mlp", "TTT", "24.17", "23.51", "Titans T1"},
    {"760M", "gated_deltanet", "Gated DeltaNet", "21.18", "22.09", "Titans T1"},
    {"760M", "samba", "Samba∗", "20.63", "22.71", "Titans T1"},
    {"760M", "gdn_h2", "Gated DeltaNet-H2∗", "19.88", "20.83", "Titans T1"},
    {"760M", "titans_lmm", "Titans (LMM)", "20.04", "21.96", "Titans T1"},
    {"760M", "titans_mac", "Titans (MAC)", "19.93", "20.12", "Titans T1"},
    {"760M", "titans_mag", "Titans (MAG)", "18.61", "19.86", "Titans T1"},
    {"760M", "titans_mal", "Titans (MAL)", "19.07", "20.33", "Titans T1"},
    // arXiv:2504.13173 Miras Table 2, block "760M params / 30B tokens"
    {"760M", "moneta", "Moneta", "21.18", "21.94", "Miras T2"},
    {"760M", "yaad", "Yaad", "20.99", "21.57", "Miras T2"},
    {"760M", "memora", "Memora", "22.28", "22.31", "Miras T2"},
    {"760M", "moneta_h", "Moneta-H", "18.72", "20.13", "Miras T2"},
    {"760M", "yaad_h", "Yaad-H", "18.59", "19.80", "Miras T2"},
    {"760M", "memora_h", "Memora-H", "18.24", "20.55", "Miras T2"},
    // arXiv:2505.23735 Atlas main table, block "760M params / 30B tokens"
    {"760M", "deep_transformer", "DeepTransformers", "20.32", "20.67", "Atlas main"},
    {"760M", "dot", "DOT", "19.96", "20.15", "Atlas main"},
    {"760M", "swdt", "SWDT", "19.89", "21.52", "Atlas main"},
    {"760M", "dla", "DLA", "23.12", "22.09", "Atlas main"},
    {"760M", "omeganet", "OmegaNet", "19.16", "20.14", "Atlas main"},
    {"760M", "atlas", "ATLAS", "18.92", "21.01", "Atlas main"},
    {"760M", "atlas_pp", "ATLAS++", "19.04", "20.03", "Atlas main"},
    {"760M", "atlas_mag", "ATLAS (MAG)", "18.62", "21.18", "Atlas main"},
    {"760M", "atlas_mal", "ATLAS (MAL)", "19.07", "21.46", "Atlas main"},
    // arXiv:2502.13685 MoM Table 3, block "340M params / 15B tokens" (Wiki ppl, Lamb ppl)
    {"mom340M", "transformer", "Transformer++", "26.88", "76.46", "MoM T3"},
    {"mom340M", "retnet", "RetNet", "31.07", "87.11", "MoM T3"},
    {"mom340M", "gla", "GLA", "28.78", "79.95", "MoM T3"},
    {"mom340M", "gated_deltanet", "Gated DeltaNet", "26.47", "58.59", "MoM T3"},
    {"mom340M", "mom", "MoM", "25.86", "55.41", "MoM T3"},
  };
  return rows;
}

}  // namespace mnemo
