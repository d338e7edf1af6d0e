// Reference ids for make_cases.sh: Hugging Face tokenizers (Rust, through the
// @anush008/tokenizers 0.6.0 N-API binding, the same library the Flux oracle's
// T5TokenizerFast stand-in uses: ../../../../shared/tools/comfyref/flux) encoding
// each string of a JSON array of UTF-8 byte arrays with add_special_tokens.
const { Tokenizer } = require(require("path").join(process.env.HF_TOKENIZERS_NODE_MODULES, "@anush008/tokenizers"));
const tok = Tokenizer.fromFile(process.argv[2]);
const arr = JSON.parse(require("fs").readFileSync(process.argv[3], "utf8"));
(async () => {
  const out = [];
  for (const b of arr) out.push(Array.from((await tok.encode(Buffer.from(b).toString("utf8"))).getIds()));
  process.stdout.write(JSON.stringify(out) + "\n");
})();
