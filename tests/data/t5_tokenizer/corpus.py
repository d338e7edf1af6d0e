import json, random, sys
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
hand = [
 "", " ", "  ", "\t", "\n", "\r\n", "a\r\nb", "a\rb", "a\u00a0b", "a\u3000b", "a\u2009b", "\u200b", "a\u200db",
 "e\u0301", "E\u0301 cafe\u0301", "\uff46\u0301", "\uff21\uff22\uff23", "\u2460\u2461", "\u00bd \u2153", "\ufb01nance", "\u2122", "\u2122\u001eg",
 "\ud55c\uad6d\uc5b4", "\u1100\u1161\u11a8", "\u1100\u1161", "\u0915\u094d\u0937", "\u0915\u094d\u200d\u0937", "\u0928\u092e\u0938\u094d\u0924\u0947",
 "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1FA\U0001F1F8\U0001F1EB\U0001F1F7", "\U0001F1FA\U0001F1F8\U0001F1EB", "\u2764\ufe0f", "\u263a\ufe0f x",
 "\U0001F44D\U0001F3FD", "<extra_id_5>", "a<extra_id_5>b", "<extra_id_5 >", "<extra_id_", "</s></s>", "x</s>", "</s>x", " </s> x ", "<pad><unk>",
 "<extra_id_99><extra_id_0>", "<<extra_id_1>>", "hello  world", "hello   world  ", "   lead", "trail   ", "a \u2581 b", "\u2581\u2581x", "a\u2581\u2581b",
 "Caf\u00e9 \u2014 na\u00efve", "\u6771\u4eac \u5927\u962a", "\u3053\u3093\u306b\u3061\u306f", "\uff8a\uff9d\uff76\uff78", "\u0410\u0411\u0412 \u0430\u0431\u0432",
 "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "x\u0000y", "\u0007bell", "\u00ad", "a\u00adb",
 "\u2028\u2029", "\u0085", "ABC def GHI", "1234567890", "3.14159", "$100 & 50%", "(red:1.2)", "[blue]", "\\(x\\)",
 "\U0001D400\U0001D401", "\u212b", "\u2126", "\u1e9b\u0323", "\u0041\u030a", "\u00c5", "\u1f80", "\u0390", "i\u0307",
 "supercalifragilisticexpialidocious" * 5, "z" * 300, "\u00e9" * 100, "\U0001F600" * 20,
]
pools = [
 (0x20, 0x7e), (0xa0, 0x17f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
 (0x980, 0x9ff), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x1e00, 0x1fff), (0x2000, 0x206f), (0x2070, 0x218f),
 (0x2190, 0x23ff), (0x2460, 0x24ff), (0x2600, 0x27bf), (0x3000, 0x30ff), (0x3130, 0x318f), (0x3200, 0x33ff),
 (0x4e00, 0x4e80), (0xac00, 0xac40), (0xfb00, 0xfb4f), (0xfe00, 0xfe0f), (0xfe30, 0xfe6f), (0xff00, 0xffef),
 (0x1d400, 0x1d7ff), (0x1f000, 0x1faff), (0xe0000, 0xe007f), (0x0, 0x1f),
]
def rnd():
    out = []
    for _ in range(random.randint(1, 25)):
        r = random.random()
        if r < 0.25: out.append(random.choice([" ", "  ", "   ", "\t", "\n"]))
        elif r < 0.35: out.append(random.choice(["<extra_id_%d>" % random.randint(0, 99), "</s>", "<pad>", "<unk>", "\u200d", "\ufe0f", "\u0301"]))
        else:
            lo, hi = random.choice(pools)
            for _ in range(random.randint(1, 4)):
                c = random.randint(lo, hi)
                if 0xd800 <= c <= 0xdfff: continue
                out.append(chr(c))
    return "".join(out)
strs = hand + [rnd() for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 500)]
print(json.dumps([list(s.encode("utf-8")) for s in strs]))
