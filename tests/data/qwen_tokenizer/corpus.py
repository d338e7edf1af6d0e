# Strings for make_cases.sh: hand-picked cases aimed at Qwen2's pre-tokenizer
# regex (contractions in any case, space runs with and without newlines,
# punctuation runs, digits, letters of every script), NFC (combining marks,
# Hangul jamo, characters newer than the normalizer's Unicode 9.0), added
# tokens inside and around text, then random strings from those pools.
import json, random, sys
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
hand = [
 "", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\n ", " \n \n  x", "a\r\nb", "a\rb", "x \r\n \r\n y",
 "it's", "IT'S", "It'S", "we'RE", "we'Re", "they've", "I'M", "you'LL", "he'D", "'s", "''s", "'", "x'", "'x",
 "y'all", "don'T", "it'\u017f", "it'\u017fa", "'ss", "'re'", "a'b'c", "'\u212a", "rock'n'roll",
 "a  b", "a   b", "a\t\tb", "a \tb", "a\t b", "  lead", "trail  ", "trail \n", "\t\tx", "x\t", " ", "a\u00a0b",
 "\u00a0a", "\u3000\u3000x", "a\u3000 b", "\u0085x", "a\u0085\nb", "a\u2028b", "\u2029", "a\u180eb", "a\u200bb",
 "\u1680x", "a\u202f\u205fb", " \u00a0\n\u00a0 x",
 "!!!\n\n", " !!", "a!b", "(wow)...", "<<>>", "\\(x\\)", "...\r\n", " ...\n\n\n", "!? \n", "a.b.c", "a,b", ",a",
 " ,a", "-x", " -x", "__init__", "#hash", "@user", "$100", "50%", "1+1=2", "a/b", "~~~", "\"quoted\"", "`code`",
 "12345", "3.14159", " 42", "a1b2", "\u0663\u0664", "\u216b", "\u00bd", "x\u00b2", "\u2460\u2461", "\U0001D7D8",
 "Caf\u00e9", "cafe\u0301", "E\u0301\u0302", "\u1e9b\u0323", "\u212b", "\u2126", "\u0041\u030a", "\u1f80",
 "\u1100\u1161\u11a8", "\u1100\u1161", "\uac00\u11a8", "\ud55c\uad6d\uc5b4", "a\u0301\u0323\u0302", "\u0d3b\u0d3c",
 "\u0915\u094d\u0937", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd",
 "\u6771\u4eac\u30bf\u30ef\u30fc", "\u3053\u3093\u306b\u3061\u306f", "\uff8a\uff9d\uff76\uff78", "\uff46\uff55\uff4c\uff4c",
 "\u0410\u0411\u0412 \u0430\u0431\u0432", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\U00011F04\U00011F05", "\U0002EBF0x",
 "\U00010D4A\U00010D4B", "\U0001E5D0", "a\u0cf3", "\u0378", "\ue000", "\U0001F600\U0001F600", "\U0001F642\U0001F3D4\ufe0f",
 "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1FA\U0001F1F8", "\u2764\ufe0f", "\U0001F44D\U0001F3FD",
 "<|im_end|>", "<|im_start|>user\n", "a<|endoftext|>b", "<think>x</think>", "<|im_end", "|im_end|>", "<|im_end|>\u0338",
 "<<|im_end|>>", "<tool_call>", "<|fim_prefix|>x<|fim_suffix|>", "<|im_start|><|im_end|>", "x <|im_end|> y",
 "<|endoftext|><|endoftext|>", "<|vision_start|><|image_pad|><|vision_end|>", "<think>\n\n</think>\n\n", "< think>",
 "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
 "supercalifragilisticexpialidocious" * 4, "z" * 300, "\u00e9" * 50, "\U0001F600" * 20, " " * 40 + "x", "\n" * 30,
 "a" + "\u0301" * 40, "!" * 100, "9" * 50,
]
pools = [
 (0x20, 0x7e), (0x20, 0x7e), (0xa0, 0x17f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff),
 (0x900, 0x97f), (0xd00, 0xd7f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x1e00, 0x1fff), (0x2000, 0x206f),
 (0x2070, 0x218f), (0x2460, 0x24ff), (0x3000, 0x30ff), (0x4e00, 0x4e80), (0xac00, 0xac40), (0xfb00, 0xfb4f),
 (0xff00, 0xffef), (0x1d400, 0x1d7ff), (0x1f000, 0x1faff), (0x11f00, 0x11f5f), (0x10d40, 0x10d8f),
 (0x1e5d0, 0x1e5ff), (0x0, 0x1f),
]
def rnd():
    out = []
    for _ in range(random.randint(1, 25)):
        r = random.random()
        if r < 0.25: out.append(random.choice([" ", "  ", "   ", "\t", "\n", "\r\n", " \n", "\n\n", "\u00a0", "\u3000"]))
        elif r < 0.32: out.append(random.choice(["<|im_end|>", "<|im_start|>", "<|endoftext|>", "<think>", "</think>",
                                                 "'s", "'LL", "'re", "\u0301", "\u200d", "\ufe0f", "<|im_", "|>"]))
        else:
            lo, hi = random.choice(pools)
            for _ in range(random.randint(1, 5)):
                c = random.randint(lo, hi)
                if 0xd800 <= c <= 0xdfff: continue
                out.append(chr(c))
    return "".join(out)
strs = hand + [rnd() for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 500)]
print(json.dumps([list(s.encode("utf-8")) for s in strs]))
