/* Tokenizers from a GGUF vocab: SentencePiece-style `llama` and byte-level BPE `gpt2`, following llama.cpp. */
#include "core/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tokenizer.ggml.token_type values. */
enum {
    MK_TOK_NORMAL = 1,
    MK_TOK_UNKNOWN = 2,
    MK_TOK_CONTROL = 3,
    MK_TOK_USER_DEFINED = 4,
    MK_TOK_UNUSED = 5,
    MK_TOK_BYTE = 6,
};

enum mk_tok_kind { MK_TOK_SPM, MK_TOK_BPE };

/* Codepoint classes the GPT-2 pre-tokenizer needs. DEFINED marks any codepoint below 0x110000:
 * llama.cpp gives such codepoints non-empty flags, and only those can join a punctuation run. */
enum {
    MK_CPT_LETTER = 1,
    MK_CPT_NUMBER = 2,
    MK_CPT_SPACE = 4,
    MK_CPT_DEFINED = 8,
};

/* Unicode general categories L* and N* as sorted inclusive codepoint ranges, generated from
 * Python's unicodedata (Unicode 14.0); llama.cpp's unicode-data.cpp holds the same categories. */
static const uint32_t mk_tok_letter_ranges[][2] = {
    { 0x41, 0x5A },       { 0x61, 0x7A },       { 0xAA, 0xAA },       { 0xB5, 0xB5 },       { 0xBA, 0xBA },
    { 0xC0, 0xD6 },       { 0xD8, 0xF6 },       { 0xF8, 0x2C1 },      { 0x2C6, 0x2D1 },     { 0x2E0, 0x2E4 },
    { 0x2EC, 0x2EC },     { 0x2EE, 0x2EE },     { 0x370, 0x374 },     { 0x376, 0x377 },     { 0x37A, 0x37D },
    { 0x37F, 0x37F },     { 0x386, 0x386 },     { 0x388, 0x38A },     { 0x38C, 0x38C },     { 0x38E, 0x3A1 },
    { 0x3A3, 0x3F5 },     { 0x3F7, 0x481 },     { 0x48A, 0x52F },     { 0x531, 0x556 },     { 0x559, 0x559 },
    { 0x560, 0x588 },     { 0x5D0, 0x5EA },     { 0x5EF, 0x5F2 },     { 0x620, 0x64A },     { 0x66E, 0x66F },
    { 0x671, 0x6D3 },     { 0x6D5, 0x6D5 },     { 0x6E5, 0x6E6 },     { 0x6EE, 0x6EF },     { 0x6FA, 0x6FC },
    { 0x6FF, 0x6FF },     { 0x710, 0x710 },     { 0x712, 0x72F },     { 0x74D, 0x7A5 },     { 0x7B1, 0x7B1 },
    { 0x7CA, 0x7EA },     { 0x7F4, 0x7F5 },     { 0x7FA, 0x7FA },     { 0x800, 0x815 },     { 0x81A, 0x81A },
    { 0x824, 0x824 },     { 0x828, 0x828 },     { 0x840, 0x858 },     { 0x860, 0x86A },     { 0x870, 0x887 },
    { 0x889, 0x88E },     { 0x8A0, 0x8C9 },     { 0x904, 0x939 },     { 0x93D, 0x93D },     { 0x950, 0x950 },
    { 0x958, 0x961 },     { 0x971, 0x980 },     { 0x985, 0x98C },     { 0x98F, 0x990 },     { 0x993, 0x9A8 },
    { 0x9AA, 0x9B0 },     { 0x9B2, 0x9B2 },     { 0x9B6, 0x9B9 },     { 0x9BD, 0x9BD },     { 0x9CE, 0x9CE },
    { 0x9DC, 0x9DD },     { 0x9DF, 0x9E1 },     { 0x9F0, 0x9F1 },     { 0x9FC, 0x9FC },     { 0xA05, 0xA0A },
    { 0xA0F, 0xA10 },     { 0xA13, 0xA28 },     { 0xA2A, 0xA30 },     { 0xA32, 0xA33 },     { 0xA35, 0xA36 },
    { 0xA38, 0xA39 },     { 0xA59, 0xA5C },     { 0xA5E, 0xA5E },     { 0xA72, 0xA74 },     { 0xA85, 0xA8D },
    { 0xA8F, 0xA91 },     { 0xA93, 0xAA8 },     { 0xAAA, 0xAB0 },     { 0xAB2, 0xAB3 },     { 0xAB5, 0xAB9 },
    { 0xABD, 0xABD },     { 0xAD0, 0xAD0 },     { 0xAE0, 0xAE1 },     { 0xAF9, 0xAF9 },     { 0xB05, 0xB0C },
    { 0xB0F, 0xB10 },     { 0xB13, 0xB28 },     { 0xB2A, 0xB30 },     { 0xB32, 0xB33 },     { 0xB35, 0xB39 },
    { 0xB3D, 0xB3D },     { 0xB5C, 0xB5D },     { 0xB5F, 0xB61 },     { 0xB71, 0xB71 },     { 0xB83, 0xB83 },
    { 0xB85, 0xB8A },     { 0xB8E, 0xB90 },     { 0xB92, 0xB95 },     { 0xB99, 0xB9A },     { 0xB9C, 0xB9C },
    { 0xB9E, 0xB9F },     { 0xBA3, 0xBA4 },     { 0xBA8, 0xBAA },     { 0xBAE, 0xBB9 },     { 0xBD0, 0xBD0 },
    { 0xC05, 0xC0C },     { 0xC0E, 0xC10 },     { 0xC12, 0xC28 },     { 0xC2A, 0xC39 },     { 0xC3D, 0xC3D },
    { 0xC58, 0xC5A },     { 0xC5D, 0xC5D },     { 0xC60, 0xC61 },     { 0xC80, 0xC80 },     { 0xC85, 0xC8C },
    { 0xC8E, 0xC90 },     { 0xC92, 0xCA8 },     { 0xCAA, 0xCB3 },     { 0xCB5, 0xCB9 },     { 0xCBD, 0xCBD },
    { 0xCDD, 0xCDE },     { 0xCE0, 0xCE1 },     { 0xCF1, 0xCF2 },     { 0xD04, 0xD0C },     { 0xD0E, 0xD10 },
    { 0xD12, 0xD3A },     { 0xD3D, 0xD3D },     { 0xD4E, 0xD4E },     { 0xD54, 0xD56 },     { 0xD5F, 0xD61 },
    { 0xD7A, 0xD7F },     { 0xD85, 0xD96 },     { 0xD9A, 0xDB1 },     { 0xDB3, 0xDBB },     { 0xDBD, 0xDBD },
    { 0xDC0, 0xDC6 },     { 0xE01, 0xE30 },     { 0xE32, 0xE33 },     { 0xE40, 0xE46 },     { 0xE81, 0xE82 },
    { 0xE84, 0xE84 },     { 0xE86, 0xE8A },     { 0xE8C, 0xEA3 },     { 0xEA5, 0xEA5 },     { 0xEA7, 0xEB0 },
    { 0xEB2, 0xEB3 },     { 0xEBD, 0xEBD },     { 0xEC0, 0xEC4 },     { 0xEC6, 0xEC6 },     { 0xEDC, 0xEDF },
    { 0xF00, 0xF00 },     { 0xF40, 0xF47 },     { 0xF49, 0xF6C },     { 0xF88, 0xF8C },     { 0x1000, 0x102A },
    { 0x103F, 0x103F },   { 0x1050, 0x1055 },   { 0x105A, 0x105D },   { 0x1061, 0x1061 },   { 0x1065, 0x1066 },
    { 0x106E, 0x1070 },   { 0x1075, 0x1081 },   { 0x108E, 0x108E },   { 0x10A0, 0x10C5 },   { 0x10C7, 0x10C7 },
    { 0x10CD, 0x10CD },   { 0x10D0, 0x10FA },   { 0x10FC, 0x1248 },   { 0x124A, 0x124D },   { 0x1250, 0x1256 },
    { 0x1258, 0x1258 },   { 0x125A, 0x125D },   { 0x1260, 0x1288 },   { 0x128A, 0x128D },   { 0x1290, 0x12B0 },
    { 0x12B2, 0x12B5 },   { 0x12B8, 0x12BE },   { 0x12C0, 0x12C0 },   { 0x12C2, 0x12C5 },   { 0x12C8, 0x12D6 },
    { 0x12D8, 0x1310 },   { 0x1312, 0x1315 },   { 0x1318, 0x135A },   { 0x1380, 0x138F },   { 0x13A0, 0x13F5 },
    { 0x13F8, 0x13FD },   { 0x1401, 0x166C },   { 0x166F, 0x167F },   { 0x1681, 0x169A },   { 0x16A0, 0x16EA },
    { 0x16F1, 0x16F8 },   { 0x1700, 0x1711 },   { 0x171F, 0x1731 },   { 0x1740, 0x1751 },   { 0x1760, 0x176C },
    { 0x176E, 0x1770 },   { 0x1780, 0x17B3 },   { 0x17D7, 0x17D7 },   { 0x17DC, 0x17DC },   { 0x1820, 0x1878 },
    { 0x1880, 0x1884 },   { 0x1887, 0x18A8 },   { 0x18AA, 0x18AA },   { 0x18B0, 0x18F5 },   { 0x1900, 0x191E },
    { 0x1950, 0x196D },   { 0x1970, 0x1974 },   { 0x1980, 0x19AB },   { 0x19B0, 0x19C9 },   { 0x1A00, 0x1A16 },
    { 0x1A20, 0x1A54 },   { 0x1AA7, 0x1AA7 },   { 0x1B05, 0x1B33 },   { 0x1B45, 0x1B4C },   { 0x1B83, 0x1BA0 },
    { 0x1BAE, 0x1BAF },   { 0x1BBA, 0x1BE5 },   { 0x1C00, 0x1C23 },   { 0x1C4D, 0x1C4F },   { 0x1C5A, 0x1C7D },
    { 0x1C80, 0x1C88 },   { 0x1C90, 0x1CBA },   { 0x1CBD, 0x1CBF },   { 0x1CE9, 0x1CEC },   { 0x1CEE, 0x1CF3 },
    { 0x1CF5, 0x1CF6 },   { 0x1CFA, 0x1CFA },   { 0x1D00, 0x1DBF },   { 0x1E00, 0x1F15 },   { 0x1F18, 0x1F1D },
    { 0x1F20, 0x1F45 },   { 0x1F48, 0x1F4D },   { 0x1F50, 0x1F57 },   { 0x1F59, 0x1F59 },   { 0x1F5B, 0x1F5B },
    { 0x1F5D, 0x1F5D },   { 0x1F5F, 0x1F7D },   { 0x1F80, 0x1FB4 },   { 0x1FB6, 0x1FBC },   { 0x1FBE, 0x1FBE },
    { 0x1FC2, 0x1FC4 },   { 0x1FC6, 0x1FCC },   { 0x1FD0, 0x1FD3 },   { 0x1FD6, 0x1FDB },   { 0x1FE0, 0x1FEC },
    { 0x1FF2, 0x1FF4 },   { 0x1FF6, 0x1FFC },   { 0x2071, 0x2071 },   { 0x207F, 0x207F },   { 0x2090, 0x209C },
    { 0x2102, 0x2102 },   { 0x2107, 0x2107 },   { 0x210A, 0x2113 },   { 0x2115, 0x2115 },   { 0x2119, 0x211D },
    { 0x2124, 0x2124 },   { 0x2126, 0x2126 },   { 0x2128, 0x2128 },   { 0x212A, 0x212D },   { 0x212F, 0x2139 },
    { 0x213C, 0x213F },   { 0x2145, 0x2149 },   { 0x214E, 0x214E },   { 0x2183, 0x2184 },   { 0x2C00, 0x2CE4 },
    { 0x2CEB, 0x2CEE },   { 0x2CF2, 0x2CF3 },   { 0x2D00, 0x2D25 },   { 0x2D27, 0x2D27 },   { 0x2D2D, 0x2D2D },
    { 0x2D30, 0x2D67 },   { 0x2D6F, 0x2D6F },   { 0x2D80, 0x2D96 },   { 0x2DA0, 0x2DA6 },   { 0x2DA8, 0x2DAE },
    { 0x2DB0, 0x2DB6 },   { 0x2DB8, 0x2DBE },   { 0x2DC0, 0x2DC6 },   { 0x2DC8, 0x2DCE },   { 0x2DD0, 0x2DD6 },
    { 0x2DD8, 0x2DDE },   { 0x2E2F, 0x2E2F },   { 0x3005, 0x3006 },   { 0x3031, 0x3035 },   { 0x303B, 0x303C },
    { 0x3041, 0x3096 },   { 0x309D, 0x309F },   { 0x30A1, 0x30FA },   { 0x30FC, 0x30FF },   { 0x3105, 0x312F },
    { 0x3131, 0x318E },   { 0x31A0, 0x31BF },   { 0x31F0, 0x31FF },   { 0x3400, 0x4DBF },   { 0x4E00, 0xA48C },
    { 0xA4D0, 0xA4FD },   { 0xA500, 0xA60C },   { 0xA610, 0xA61F },   { 0xA62A, 0xA62B },   { 0xA640, 0xA66E },
    { 0xA67F, 0xA69D },   { 0xA6A0, 0xA6E5 },   { 0xA717, 0xA71F },   { 0xA722, 0xA788 },   { 0xA78B, 0xA7CA },
    { 0xA7D0, 0xA7D1 },   { 0xA7D3, 0xA7D3 },   { 0xA7D5, 0xA7D9 },   { 0xA7F2, 0xA801 },   { 0xA803, 0xA805 },
    { 0xA807, 0xA80A },   { 0xA80C, 0xA822 },   { 0xA840, 0xA873 },   { 0xA882, 0xA8B3 },   { 0xA8F2, 0xA8F7 },
    { 0xA8FB, 0xA8FB },   { 0xA8FD, 0xA8FE },   { 0xA90A, 0xA925 },   { 0xA930, 0xA946 },   { 0xA960, 0xA97C },
    { 0xA984, 0xA9B2 },   { 0xA9CF, 0xA9CF },   { 0xA9E0, 0xA9E4 },   { 0xA9E6, 0xA9EF },   { 0xA9FA, 0xA9FE },
    { 0xAA00, 0xAA28 },   { 0xAA40, 0xAA42 },   { 0xAA44, 0xAA4B },   { 0xAA60, 0xAA76 },   { 0xAA7A, 0xAA7A },
    { 0xAA7E, 0xAAAF },   { 0xAAB1, 0xAAB1 },   { 0xAAB5, 0xAAB6 },   { 0xAAB9, 0xAABD },   { 0xAAC0, 0xAAC0 },
    { 0xAAC2, 0xAAC2 },   { 0xAADB, 0xAADD },   { 0xAAE0, 0xAAEA },   { 0xAAF2, 0xAAF4 },   { 0xAB01, 0xAB06 },
    { 0xAB09, 0xAB0E },   { 0xAB11, 0xAB16 },   { 0xAB20, 0xAB26 },   { 0xAB28, 0xAB2E },   { 0xAB30, 0xAB5A },
    { 0xAB5C, 0xAB69 },   { 0xAB70, 0xABE2 },   { 0xAC00, 0xD7A3 },   { 0xD7B0, 0xD7C6 },   { 0xD7CB, 0xD7FB },
    { 0xF900, 0xFA6D },   { 0xFA70, 0xFAD9 },   { 0xFB00, 0xFB06 },   { 0xFB13, 0xFB17 },   { 0xFB1D, 0xFB1D },
    { 0xFB1F, 0xFB28 },   { 0xFB2A, 0xFB36 },   { 0xFB38, 0xFB3C },   { 0xFB3E, 0xFB3E },   { 0xFB40, 0xFB41 },
    { 0xFB43, 0xFB44 },   { 0xFB46, 0xFBB1 },   { 0xFBD3, 0xFD3D },   { 0xFD50, 0xFD8F },   { 0xFD92, 0xFDC7 },
    { 0xFDF0, 0xFDFB },   { 0xFE70, 0xFE74 },   { 0xFE76, 0xFEFC },   { 0xFF21, 0xFF3A },   { 0xFF41, 0xFF5A },
    { 0xFF66, 0xFFBE },   { 0xFFC2, 0xFFC7 },   { 0xFFCA, 0xFFCF },   { 0xFFD2, 0xFFD7 },   { 0xFFDA, 0xFFDC },
    { 0x10000, 0x1000B }, { 0x1000D, 0x10026 }, { 0x10028, 0x1003A }, { 0x1003C, 0x1003D }, { 0x1003F, 0x1004D },
    { 0x10050, 0x1005D }, { 0x10080, 0x100FA }, { 0x10280, 0x1029C }, { 0x102A0, 0x102D0 }, { 0x10300, 0x1031F },
    { 0x1032D, 0x10340 }, { 0x10342, 0x10349 }, { 0x10350, 0x10375 }, { 0x10380, 0x1039D }, { 0x103A0, 0x103C3 },
    { 0x103C8, 0x103CF }, { 0x10400, 0x1049D }, { 0x104B0, 0x104D3 }, { 0x104D8, 0x104FB }, { 0x10500, 0x10527 },
    { 0x10530, 0x10563 }, { 0x10570, 0x1057A }, { 0x1057C, 0x1058A }, { 0x1058C, 0x10592 }, { 0x10594, 0x10595 },
    { 0x10597, 0x105A1 }, { 0x105A3, 0x105B1 }, { 0x105B3, 0x105B9 }, { 0x105BB, 0x105BC }, { 0x10600, 0x10736 },
    { 0x10740, 0x10755 }, { 0x10760, 0x10767 }, { 0x10780, 0x10785 }, { 0x10787, 0x107B0 }, { 0x107B2, 0x107BA },
    { 0x10800, 0x10805 }, { 0x10808, 0x10808 }, { 0x1080A, 0x10835 }, { 0x10837, 0x10838 }, { 0x1083C, 0x1083C },
    { 0x1083F, 0x10855 }, { 0x10860, 0x10876 }, { 0x10880, 0x1089E }, { 0x108E0, 0x108F2 }, { 0x108F4, 0x108F5 },
    { 0x10900, 0x10915 }, { 0x10920, 0x10939 }, { 0x10980, 0x109B7 }, { 0x109BE, 0x109BF }, { 0x10A00, 0x10A00 },
    { 0x10A10, 0x10A13 }, { 0x10A15, 0x10A17 }, { 0x10A19, 0x10A35 }, { 0x10A60, 0x10A7C }, { 0x10A80, 0x10A9C },
    { 0x10AC0, 0x10AC7 }, { 0x10AC9, 0x10AE4 }, { 0x10B00, 0x10B35 }, { 0x10B40, 0x10B55 }, { 0x10B60, 0x10B72 },
    { 0x10B80, 0x10B91 }, { 0x10C00, 0x10C48 }, { 0x10C80, 0x10CB2 }, { 0x10CC0, 0x10CF2 }, { 0x10D00, 0x10D23 },
    { 0x10E80, 0x10EA9 }, { 0x10EB0, 0x10EB1 }, { 0x10F00, 0x10F1C }, { 0x10F27, 0x10F27 }, { 0x10F30, 0x10F45 },
    { 0x10F70, 0x10F81 }, { 0x10FB0, 0x10FC4 }, { 0x10FE0, 0x10FF6 }, { 0x11003, 0x11037 }, { 0x11071, 0x11072 },
    { 0x11075, 0x11075 }, { 0x11083, 0x110AF }, { 0x110D0, 0x110E8 }, { 0x11103, 0x11126 }, { 0x11144, 0x11144 },
    { 0x11147, 0x11147 }, { 0x11150, 0x11172 }, { 0x11176, 0x11176 }, { 0x11183, 0x111B2 }, { 0x111C1, 0x111C4 },
    { 0x111DA, 0x111DA }, { 0x111DC, 0x111DC }, { 0x11200, 0x11211 }, { 0x11213, 0x1122B }, { 0x11280, 0x11286 },
    { 0x11288, 0x11288 }, { 0x1128A, 0x1128D }, { 0x1128F, 0x1129D }, { 0x1129F, 0x112A8 }, { 0x112B0, 0x112DE },
    { 0x11305, 0x1130C }, { 0x1130F, 0x11310 }, { 0x11313, 0x11328 }, { 0x1132A, 0x11330 }, { 0x11332, 0x11333 },
    { 0x11335, 0x11339 }, { 0x1133D, 0x1133D }, { 0x11350, 0x11350 }, { 0x1135D, 0x11361 }, { 0x11400, 0x11434 },
    { 0x11447, 0x1144A }, { 0x1145F, 0x11461 }, { 0x11480, 0x114AF }, { 0x114C4, 0x114C5 }, { 0x114C7, 0x114C7 },
    { 0x11580, 0x115AE }, { 0x115D8, 0x115DB }, { 0x11600, 0x1162F }, { 0x11644, 0x11644 }, { 0x11680, 0x116AA },
    { 0x116B8, 0x116B8 }, { 0x11700, 0x1171A }, { 0x11740, 0x11746 }, { 0x11800, 0x1182B }, { 0x118A0, 0x118DF },
    { 0x118FF, 0x11906 }, { 0x11909, 0x11909 }, { 0x1190C, 0x11913 }, { 0x11915, 0x11916 }, { 0x11918, 0x1192F },
    { 0x1193F, 0x1193F }, { 0x11941, 0x11941 }, { 0x119A0, 0x119A7 }, { 0x119AA, 0x119D0 }, { 0x119E1, 0x119E1 },
    { 0x119E3, 0x119E3 }, { 0x11A00, 0x11A00 }, { 0x11A0B, 0x11A32 }, { 0x11A3A, 0x11A3A }, { 0x11A50, 0x11A50 },
    { 0x11A5C, 0x11A89 }, { 0x11A9D, 0x11A9D }, { 0x11AB0, 0x11AF8 }, { 0x11C00, 0x11C08 }, { 0x11C0A, 0x11C2E },
    { 0x11C40, 0x11C40 }, { 0x11C72, 0x11C8F }, { 0x11D00, 0x11D06 }, { 0x11D08, 0x11D09 }, { 0x11D0B, 0x11D30 },
    { 0x11D46, 0x11D46 }, { 0x11D60, 0x11D65 }, { 0x11D67, 0x11D68 }, { 0x11D6A, 0x11D89 }, { 0x11D98, 0x11D98 },
    { 0x11EE0, 0x11EF2 }, { 0x11FB0, 0x11FB0 }, { 0x12000, 0x12399 }, { 0x12480, 0x12543 }, { 0x12F90, 0x12FF0 },
    { 0x13000, 0x1342E }, { 0x14400, 0x14646 }, { 0x16800, 0x16A38 }, { 0x16A40, 0x16A5E }, { 0x16A70, 0x16ABE },
    { 0x16AD0, 0x16AED }, { 0x16B00, 0x16B2F }, { 0x16B40, 0x16B43 }, { 0x16B63, 0x16B77 }, { 0x16B7D, 0x16B8F },
    { 0x16E40, 0x16E7F }, { 0x16F00, 0x16F4A }, { 0x16F50, 0x16F50 }, { 0x16F93, 0x16F9F }, { 0x16FE0, 0x16FE1 },
    { 0x16FE3, 0x16FE3 }, { 0x17000, 0x187F7 }, { 0x18800, 0x18CD5 }, { 0x18D00, 0x18D08 }, { 0x1AFF0, 0x1AFF3 },
    { 0x1AFF5, 0x1AFFB }, { 0x1AFFD, 0x1AFFE }, { 0x1B000, 0x1B122 }, { 0x1B150, 0x1B152 }, { 0x1B164, 0x1B167 },
    { 0x1B170, 0x1B2FB }, { 0x1BC00, 0x1BC6A }, { 0x1BC70, 0x1BC7C }, { 0x1BC80, 0x1BC88 }, { 0x1BC90, 0x1BC99 },
    { 0x1D400, 0x1D454 }, { 0x1D456, 0x1D49C }, { 0x1D49E, 0x1D49F }, { 0x1D4A2, 0x1D4A2 }, { 0x1D4A5, 0x1D4A6 },
    { 0x1D4A9, 0x1D4AC }, { 0x1D4AE, 0x1D4B9 }, { 0x1D4BB, 0x1D4BB }, { 0x1D4BD, 0x1D4C3 }, { 0x1D4C5, 0x1D505 },
    { 0x1D507, 0x1D50A }, { 0x1D50D, 0x1D514 }, { 0x1D516, 0x1D51C }, { 0x1D51E, 0x1D539 }, { 0x1D53B, 0x1D53E },
    { 0x1D540, 0x1D544 }, { 0x1D546, 0x1D546 }, { 0x1D54A, 0x1D550 }, { 0x1D552, 0x1D6A5 }, { 0x1D6A8, 0x1D6C0 },
    { 0x1D6C2, 0x1D6DA }, { 0x1D6DC, 0x1D6FA }, { 0x1D6FC, 0x1D714 }, { 0x1D716, 0x1D734 }, { 0x1D736, 0x1D74E },
    { 0x1D750, 0x1D76E }, { 0x1D770, 0x1D788 }, { 0x1D78A, 0x1D7A8 }, { 0x1D7AA, 0x1D7C2 }, { 0x1D7C4, 0x1D7CB },
    { 0x1DF00, 0x1DF1E }, { 0x1E100, 0x1E12C }, { 0x1E137, 0x1E13D }, { 0x1E14E, 0x1E14E }, { 0x1E290, 0x1E2AD },
    { 0x1E2C0, 0x1E2EB }, { 0x1E7E0, 0x1E7E6 }, { 0x1E7E8, 0x1E7EB }, { 0x1E7ED, 0x1E7EE }, { 0x1E7F0, 0x1E7FE },
    { 0x1E800, 0x1E8C4 }, { 0x1E900, 0x1E943 }, { 0x1E94B, 0x1E94B }, { 0x1EE00, 0x1EE03 }, { 0x1EE05, 0x1EE1F },
    { 0x1EE21, 0x1EE22 }, { 0x1EE24, 0x1EE24 }, { 0x1EE27, 0x1EE27 }, { 0x1EE29, 0x1EE32 }, { 0x1EE34, 0x1EE37 },
    { 0x1EE39, 0x1EE39 }, { 0x1EE3B, 0x1EE3B }, { 0x1EE42, 0x1EE42 }, { 0x1EE47, 0x1EE47 }, { 0x1EE49, 0x1EE49 },
    { 0x1EE4B, 0x1EE4B }, { 0x1EE4D, 0x1EE4F }, { 0x1EE51, 0x1EE52 }, { 0x1EE54, 0x1EE54 }, { 0x1EE57, 0x1EE57 },
    { 0x1EE59, 0x1EE59 }, { 0x1EE5B, 0x1EE5B }, { 0x1EE5D, 0x1EE5D }, { 0x1EE5F, 0x1EE5F }, { 0x1EE61, 0x1EE62 },
    { 0x1EE64, 0x1EE64 }, { 0x1EE67, 0x1EE6A }, { 0x1EE6C, 0x1EE72 }, { 0x1EE74, 0x1EE77 }, { 0x1EE79, 0x1EE7C },
    { 0x1EE7E, 0x1EE7E }, { 0x1EE80, 0x1EE89 }, { 0x1EE8B, 0x1EE9B }, { 0x1EEA1, 0x1EEA3 }, { 0x1EEA5, 0x1EEA9 },
    { 0x1EEAB, 0x1EEBB }, { 0x20000, 0x2A6DF }, { 0x2A700, 0x2B738 }, { 0x2B740, 0x2B81D }, { 0x2B820, 0x2CEA1 },
    { 0x2CEB0, 0x2EBE0 }, { 0x2F800, 0x2FA1D }, { 0x30000, 0x3134A },
};
static const uint32_t mk_tok_number_ranges[][2] = {
    { 0x30, 0x39 },       { 0xB2, 0xB3 },       { 0xB9, 0xB9 },       { 0xBC, 0xBE },       { 0x660, 0x669 },
    { 0x6F0, 0x6F9 },     { 0x7C0, 0x7C9 },     { 0x966, 0x96F },     { 0x9E6, 0x9EF },     { 0x9F4, 0x9F9 },
    { 0xA66, 0xA6F },     { 0xAE6, 0xAEF },     { 0xB66, 0xB6F },     { 0xB72, 0xB77 },     { 0xBE6, 0xBF2 },
    { 0xC66, 0xC6F },     { 0xC78, 0xC7E },     { 0xCE6, 0xCEF },     { 0xD58, 0xD5E },     { 0xD66, 0xD78 },
    { 0xDE6, 0xDEF },     { 0xE50, 0xE59 },     { 0xED0, 0xED9 },     { 0xF20, 0xF33 },     { 0x1040, 0x1049 },
    { 0x1090, 0x1099 },   { 0x1369, 0x137C },   { 0x16EE, 0x16F0 },   { 0x17E0, 0x17E9 },   { 0x17F0, 0x17F9 },
    { 0x1810, 0x1819 },   { 0x1946, 0x194F },   { 0x19D0, 0x19DA },   { 0x1A80, 0x1A89 },   { 0x1A90, 0x1A99 },
    { 0x1B50, 0x1B59 },   { 0x1BB0, 0x1BB9 },   { 0x1C40, 0x1C49 },   { 0x1C50, 0x1C59 },   { 0x2070, 0x2070 },
    { 0x2074, 0x2079 },   { 0x2080, 0x2089 },   { 0x2150, 0x2182 },   { 0x2185, 0x2189 },   { 0x2460, 0x249B },
    { 0x24EA, 0x24FF },   { 0x2776, 0x2793 },   { 0x2CFD, 0x2CFD },   { 0x3007, 0x3007 },   { 0x3021, 0x3029 },
    { 0x3038, 0x303A },   { 0x3192, 0x3195 },   { 0x3220, 0x3229 },   { 0x3248, 0x324F },   { 0x3251, 0x325F },
    { 0x3280, 0x3289 },   { 0x32B1, 0x32BF },   { 0xA620, 0xA629 },   { 0xA6E6, 0xA6EF },   { 0xA830, 0xA835 },
    { 0xA8D0, 0xA8D9 },   { 0xA900, 0xA909 },   { 0xA9D0, 0xA9D9 },   { 0xA9F0, 0xA9F9 },   { 0xAA50, 0xAA59 },
    { 0xABF0, 0xABF9 },   { 0xFF10, 0xFF19 },   { 0x10107, 0x10133 }, { 0x10140, 0x10178 }, { 0x1018A, 0x1018B },
    { 0x102E1, 0x102FB }, { 0x10320, 0x10323 }, { 0x10341, 0x10341 }, { 0x1034A, 0x1034A }, { 0x103D1, 0x103D5 },
    { 0x104A0, 0x104A9 }, { 0x10858, 0x1085F }, { 0x10879, 0x1087F }, { 0x108A7, 0x108AF }, { 0x108FB, 0x108FF },
    { 0x10916, 0x1091B }, { 0x109BC, 0x109BD }, { 0x109C0, 0x109CF }, { 0x109D2, 0x109FF }, { 0x10A40, 0x10A48 },
    { 0x10A7D, 0x10A7E }, { 0x10A9D, 0x10A9F }, { 0x10AEB, 0x10AEF }, { 0x10B58, 0x10B5F }, { 0x10B78, 0x10B7F },
    { 0x10BA9, 0x10BAF }, { 0x10CFA, 0x10CFF }, { 0x10D30, 0x10D39 }, { 0x10E60, 0x10E7E }, { 0x10F1D, 0x10F26 },
    { 0x10F51, 0x10F54 }, { 0x10FC5, 0x10FCB }, { 0x11052, 0x1106F }, { 0x110F0, 0x110F9 }, { 0x11136, 0x1113F },
    { 0x111D0, 0x111D9 }, { 0x111E1, 0x111F4 }, { 0x112F0, 0x112F9 }, { 0x11450, 0x11459 }, { 0x114D0, 0x114D9 },
    { 0x11650, 0x11659 }, { 0x116C0, 0x116C9 }, { 0x11730, 0x1173B }, { 0x118E0, 0x118F2 }, { 0x11950, 0x11959 },
    { 0x11C50, 0x11C6C }, { 0x11D50, 0x11D59 }, { 0x11DA0, 0x11DA9 }, { 0x11FC0, 0x11FD4 }, { 0x12400, 0x1246E },
    { 0x16A60, 0x16A69 }, { 0x16AC0, 0x16AC9 }, { 0x16B50, 0x16B59 }, { 0x16B5B, 0x16B61 }, { 0x16E80, 0x16E96 },
    { 0x1D2E0, 0x1D2F3 }, { 0x1D360, 0x1D378 }, { 0x1D7CE, 0x1D7FF }, { 0x1E140, 0x1E149 }, { 0x1E2F0, 0x1E2F9 },
    { 0x1E8C7, 0x1E8CF }, { 0x1E950, 0x1E959 }, { 0x1EC71, 0x1ECAB }, { 0x1ECAD, 0x1ECAF }, { 0x1ECB1, 0x1ECB4 },
    { 0x1ED01, 0x1ED2D }, { 0x1ED2F, 0x1ED3D }, { 0x1F100, 0x1F10C }, { 0x1FBF0, 0x1FBF9 },
};

#define MK_TOK_NO_CPT 0xFFFFFFFFu
/* The replacement character U+FFFD stands in for invalid bytes when classifying (as llama.cpp
 * does), while the bytes themselves are kept so that they still round-trip. */
#define MK_TOK_REPLACEMENT 0xFFFDu

struct mk_tokenizer {
    enum mk_tok_kind kind;
    uint32_t n_vocab;
    char *text_blob;     /* every token's bytes, back to back */
    uint64_t *text_off;  /* (n_vocab) offset into text_blob */
    uint32_t *text_len;  /* (n_vocab) */
    float *scores;       /* (n_vocab) */
    int32_t *types;      /* (n_vocab) tokenizer.ggml.token_type */
    uint32_t *tok_slots; /* (tok_mask + 1) open addressing: id + 1, 0 when empty */
    uint64_t tok_mask;

    uint64_t n_merges;
    char *merge_blob;      /* merge strings "left right", back to back */
    uint64_t *merge_off;   /* (n_merges) offset of the left part */
    uint32_t *merge_llen;  /* (n_merges) left length; the right part starts one byte after it */
    uint32_t *merge_rlen;  /* (n_merges) right length; 0 marks an unusable entry */
    uint64_t *merge_slots; /* (merge_mask + 1): rank + 1, 0 when empty */
    uint64_t merge_mask;

    int32_t byte_token[256]; /* llama: "<0xXX>"; gpt2: the byte's mapped character; -1 when absent */
    int32_t *specials;       /* (n_specials) control, unknown and user-defined ids, longest text first */
    size_t n_specials;
    int32_t bos, eos, unk;
    bool add_space_prefix;
    uint16_t byte_to_cpt[256]; /* GPT-2 byte-to-unicode map */
    int16_t cpt_to_byte[512];  /* its inverse; -1 for codepoints it never produces */
};

static bool mk_tok_in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < r[mid][0])
            hi = mid;
        else if (c > r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

static bool mk_tok_is_space(uint32_t c) {
    /* The Unicode White_Space property (what `\s` means to the regex llama.cpp mirrors). */
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static uint8_t mk_tok_cpt_flags(uint32_t c) {
    if (c >= 0x110000) return 0;
    uint8_t f = MK_CPT_DEFINED;
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
            f |= MK_CPT_LETTER;
        else if (c >= '0' && c <= '9')
            f |= MK_CPT_NUMBER;
    } else if (mk_tok_in_ranges(mk_tok_letter_ranges, sizeof mk_tok_letter_ranges / sizeof mk_tok_letter_ranges[0],
                                c)) {
        f |= MK_CPT_LETTER;
    } else if (mk_tok_in_ranges(mk_tok_number_ranges, sizeof mk_tok_number_ranges / sizeof mk_tok_number_ranges[0],
                                c)) {
        f |= MK_CPT_NUMBER;
    }
    if (mk_tok_is_space(c)) f |= MK_CPT_SPACE;
    return f;
}

/* Length of the UTF-8 sequence at s (n >= 1 bytes available) and its codepoint, accepting what
 * llama.cpp accepts: a lead byte and the right number of continuation bytes (overlong forms
 * included). Returns 0 for an invalid sequence. */
static size_t mk_tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cpt) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cpt = c;
        return 1;
    }
    size_t len = c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    uint32_t v = c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cpt = v;
    return len;
}

static size_t mk_tok_utf8_encode(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static uint64_t mk_tok_hash(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define MK_TOK_HASH_SEED 0xcbf29ce484222325ull

static const char *mk_tok_text(const struct mk_tokenizer *t, int32_t id) { return t->text_blob + t->text_off[id]; }

static int32_t mk_tok_find(const struct mk_tokenizer *t, const char *s, size_t n) {
    if (n == 0) return -1;
    uint64_t i = mk_tok_hash(MK_TOK_HASH_SEED, s, n) & t->tok_mask;
    for (;;) {
        uint32_t slot = t->tok_slots[i];
        if (slot == 0) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (t->text_len[id] == n && memcmp(mk_tok_text(t, id), s, n) == 0) return id;
        i = (i + 1) & t->tok_mask;
    }
}

/* A later token with the same text replaces an earlier one, as in llama.cpp's token_to_id. */
static void mk_tok_insert(struct mk_tokenizer *t, int32_t id) {
    const char *s = mk_tok_text(t, id);
    size_t n = t->text_len[id];
    uint64_t i = mk_tok_hash(MK_TOK_HASH_SEED, s, n) & t->tok_mask;
    for (;;) {
        uint32_t slot = t->tok_slots[i];
        if (slot == 0 || (t->text_len[slot - 1] == n && memcmp(mk_tok_text(t, (int32_t)(slot - 1)), s, n) == 0)) {
            t->tok_slots[i] = (uint32_t)id + 1;
            return;
        }
        i = (i + 1) & t->tok_mask;
    }
}

static uint64_t mk_tok_merge_hash(const char *l, size_t ln, const char *r, size_t rn) {
    uint64_t h = mk_tok_hash(MK_TOK_HASH_SEED, l, ln);
    h = (h ^ 0x1ffu) * 0x100000001b3ull;
    return mk_tok_hash(h, r, rn);
}

static bool mk_tok_merge_eq(const struct mk_tokenizer *t, uint64_t rank, const char *l, size_t ln, const char *r,
                            size_t rn) {
    const char *m = t->merge_blob + t->merge_off[rank];
    return t->merge_llen[rank] == ln && t->merge_rlen[rank] == rn && memcmp(m, l, ln) == 0 &&
           memcmp(m + ln + 1, r, rn) == 0;
}

/* Rank of the merge (l, r), or -1. */
static int64_t mk_tok_find_merge(const struct mk_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    if (t->n_merges == 0) return -1;
    uint64_t i = mk_tok_merge_hash(l, ln, r, rn) & t->merge_mask;
    for (;;) {
        uint64_t slot = t->merge_slots[i];
        if (slot == 0) return -1;
        if (mk_tok_merge_eq(t, slot - 1, l, ln, r, rn)) return (int64_t)(slot - 1);
        i = (i + 1) & t->merge_mask;
    }
}

/* The first of duplicate merges keeps its rank, as in llama.cpp's bpe_ranks.emplace. */
static void mk_tok_insert_merge(struct mk_tokenizer *t, uint64_t rank) {
    const char *l = t->merge_blob + t->merge_off[rank];
    size_t ln = t->merge_llen[rank], rn = t->merge_rlen[rank];
    const char *r = l + ln + 1;
    uint64_t i = mk_tok_merge_hash(l, ln, r, rn) & t->merge_mask;
    for (;;) {
        uint64_t slot = t->merge_slots[i];
        if (slot == 0) {
            t->merge_slots[i] = rank + 1;
            return;
        }
        if (mk_tok_merge_eq(t, slot - 1, l, ln, r, rn)) return;
        i = (i + 1) & t->merge_mask;
    }
}

static uint64_t mk_tok_table_size(uint64_t n) {
    uint64_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

void mk_tokenizer_free(struct mk_tokenizer *t) {
    if (!t) return;
    free(t->text_blob);
    free(t->text_off);
    free(t->text_len);
    free(t->scores);
    free(t->types);
    free(t->tok_slots);
    free(t->merge_blob);
    free(t->merge_off);
    free(t->merge_llen);
    free(t->merge_rlen);
    free(t->merge_slots);
    free(t->specials);
    free(t);
}

static int mk_tok_special_cmp(const void *a, const void *b, void *ctx) {
    const struct mk_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the rest are moved
 * to U+0100 upwards in byte order. */
static void mk_tok_build_byte_map(struct mk_tokenizer *t) {
    uint32_t next = 256;
    for (int i = 0; i < 512; i++) t->cpt_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_to_cpt[b] = (uint16_t)(self ? (uint32_t)b : next++);
        t->cpt_to_byte[t->byte_to_cpt[b]] = (int16_t)b;
    }
}

static enum mk_status mk_tok_check_id(const char *field, int32_t *id, uint32_t n, struct mk_error *err) {
    if (*id < 0) {
        *id = -1;
        return MK_OK;
    }
    if ((uint32_t)*id >= n)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: %s = %d is out of range (n_tokens %u)", field, *id, n);
    return MK_OK;
}

enum mk_status mk_tokenizer_create(const struct mk_vocab_data *v, struct mk_tokenizer **out, struct mk_error *err) {
    struct mk_tokenizer *t = NULL;
    enum mk_status st;
    if (!v || !out) return mk_error_set(err, MK_ERR_INVALID_ARG, "tokenizer: vocab or out is NULL");
    *out = NULL;

    enum mk_tok_kind kind;
    if (strncmp(v->model, "llama", sizeof v->model) == 0)
        kind = MK_TOK_SPM;
    else if (strncmp(v->model, "gpt2", sizeof v->model) == 0)
        kind = MK_TOK_BPE;
    else
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "tokenizer: tokenizer.ggml.model = \"%.*s\" is not supported (want llama or gpt2)",
                            (int)strnlen(v->model, sizeof v->model), v->model);
    if (v->n_tokens == 0 || !v->tokens)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens is empty");
    if (v->n_tokens > (uint32_t)INT32_MAX)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens has %u entries (too many)",
                            v->n_tokens);
    if (v->n_merges > 0 && !v->merges)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges has %llu entries but no data",
                            (unsigned long long)v->n_merges);

    t = calloc(1, sizeof *t);
    if (!t) return mk_error_set(err, MK_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    t->n_vocab = v->n_tokens;
    t->bos = v->bos;
    t->eos = v->eos;
    t->unk = v->unk;
    /* mk_vocab_data has no tokenizer.ggml.add_space_prefix; llama.cpp's default for SPM is true. */
    t->add_space_prefix = kind == MK_TOK_SPM;
    if ((st = mk_tok_check_id("tokenizer.ggml.bos_token_id", &t->bos, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_check_id("tokenizer.ggml.eos_token_id", &t->eos, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_check_id("tokenizer.ggml.unknown_token_id", &t->unk, t->n_vocab, err)) != MK_OK)
        goto fail;

    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const struct mk_gguf_str *s = &v->tokens[i];
        if (s->len > UINT32_MAX || (s->len > 0 && !s->data)) {
            st = mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens[%u] has bad length %llu", i,
                              (unsigned long long)s->len);
            goto fail;
        }
        total += s->len;
    }
    if (total > SIZE_MAX - 1) goto nomem;
    t->text_blob = malloc((size_t)total + 1);
    t->text_off = malloc(t->n_vocab * sizeof *t->text_off);
    t->text_len = malloc(t->n_vocab * sizeof *t->text_len);
    t->scores = malloc(t->n_vocab * sizeof *t->scores);
    t->types = malloc(t->n_vocab * sizeof *t->types);
    t->tok_mask = mk_tok_table_size(t->n_vocab) - 1;
    t->tok_slots = calloc(t->tok_mask + 1, sizeof *t->tok_slots);
    t->specials = malloc(t->n_vocab * sizeof *t->specials);
    if (!t->text_blob || !t->text_off || !t->text_len || !t->scores || !t->types || !t->tok_slots || !t->specials)
        goto nomem;
    uint64_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const struct mk_gguf_str *s = &v->tokens[i];
        if (s->len) memcpy(t->text_blob + off, s->data, s->len);
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)s->len;
        off += s->len;
        t->scores[i] = v->scores ? v->scores[i] : 0.0f;
        t->types[i] = v->types ? v->types[i] : MK_TOK_NORMAL;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->text_len[i] > 0) mk_tok_insert(t, (int32_t)i);

    for (uint32_t i = 0; i < t->n_vocab; i++) {
        int32_t ty = t->types[i];
        if (t->text_len[i] > 0 && (ty == MK_TOK_CONTROL || ty == MK_TOK_UNKNOWN || ty == MK_TOK_USER_DEFINED))
            t->specials[t->n_specials++] = (int32_t)i;
    }
    qsort_r(t->specials, t->n_specials, sizeof *t->specials, mk_tok_special_cmp, t);

    mk_tok_build_byte_map(t);
    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t n;
        if (kind == MK_TOK_SPM)
            n = (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
        else
            n = mk_tok_utf8_encode(t->byte_to_cpt[b], buf);
        t->byte_token[b] = mk_tok_find(t, buf, n);
    }

    if (kind == MK_TOK_BPE && v->n_merges > 0) {
        uint64_t mtotal = 0;
        for (uint64_t i = 0; i < v->n_merges; i++) {
            const struct mk_gguf_str *s = &v->merges[i];
            if (s->len > UINT32_MAX || (s->len > 0 && !s->data)) {
                st = mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges[%llu] has bad length %llu",
                                  (unsigned long long)i, (unsigned long long)s->len);
                goto fail;
            }
            mtotal += s->len;
        }
        if (mtotal > SIZE_MAX - 1 || v->n_merges > SIZE_MAX / 16) goto nomem;
        t->n_merges = v->n_merges;
        t->merge_blob = malloc((size_t)mtotal + 1);
        t->merge_off = malloc(t->n_merges * sizeof *t->merge_off);
        t->merge_llen = malloc(t->n_merges * sizeof *t->merge_llen);
        t->merge_rlen = malloc(t->n_merges * sizeof *t->merge_rlen);
        t->merge_mask = mk_tok_table_size(t->n_merges) - 1;
        t->merge_slots = calloc(t->merge_mask + 1, sizeof *t->merge_slots);
        if (!t->merge_blob || !t->merge_off || !t->merge_llen || !t->merge_rlen || !t->merge_slots) goto nomem;
        uint64_t moff = 0;
        for (uint64_t i = 0; i < t->n_merges; i++) {
            const struct mk_gguf_str *s = &v->merges[i];
            if (s->len) memcpy(t->merge_blob + moff, s->data, s->len);
            /* llama.cpp splits at the first space after the first byte. */
            const char *sp = s->len > 1 ? memchr(s->data + 1, ' ', s->len - 1) : NULL;
            t->merge_off[i] = moff;
            t->merge_llen[i] = sp ? (uint32_t)(sp - s->data) : 0;
            t->merge_rlen[i] = sp ? (uint32_t)(s->len - (uint64_t)(sp - s->data) - 1) : 0;
            moff += s->len;
        }
        for (uint64_t i = 0; i < t->n_merges; i++)
            if (t->merge_rlen[i] > 0) mk_tok_insert_merge(t, i);
    }

    *out = t;
    return MK_OK;
nomem:
    st = mk_error_set(err, MK_ERR_NOMEM, "tokenizer: out of memory for %u tokens", v->n_tokens);
fail:
    mk_tokenizer_free(t);
    return st;
}

uint32_t mk_tokenizer_n_vocab(const struct mk_tokenizer *t) { return t->n_vocab; }
int32_t mk_tokenizer_bos(const struct mk_tokenizer *t) { return t->bos; }
int32_t mk_tokenizer_eos(const struct mk_tokenizer *t) { return t->eos; }
const char *mk_tokenizer_kind(const struct mk_tokenizer *t) { return t->kind == MK_TOK_SPM ? "llama" : "gpt2"; }

/* ---- Encoding ---- */

struct mk_tok_out {
    int32_t *ids; /* (cap) */
    size_t cap;
    size_t n; /* ids the text needs so far; may pass cap */
};

static void mk_tok_emit(struct mk_tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* A run of bytes in the working string; merged-away symbols have n == 0. */
struct mk_tok_sym {
    size_t off, n;
    ptrdiff_t prev, next; /* neighbours still alive, -1 at the ends */
};

/* A candidate merge of two adjacent symbols. key orders the queue: the SPM score, or minus the
 * BPE rank, so that in both cases the largest key wins and ties go to the leftmost pair. */
struct mk_tok_bigram {
    double key;
    ptrdiff_t left, right;
    size_t size;
};

struct mk_tok_work {
    struct mk_tok_sym *syms; /* (sym_cap) */
    size_t sym_cap;
    struct mk_tok_bigram *heap; /* (heap_cap) binary max-heap */
    size_t heap_n, heap_cap;
};

static bool mk_tok_before(const struct mk_tok_bigram *a, const struct mk_tok_bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static enum mk_status mk_tok_heap_push(struct mk_tok_work *w, struct mk_tok_bigram b) {
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
        struct mk_tok_bigram *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return MK_ERR_NOMEM;
        w->heap = h;
        w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!mk_tok_before(&b, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = b;
    return MK_OK;
}

static struct mk_tok_bigram mk_tok_heap_pop(struct mk_tok_work *w) {
    struct mk_tok_bigram top = w->heap[0];
    struct mk_tok_bigram last = w->heap[--w->heap_n];
    size_t n = w->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && mk_tok_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!mk_tok_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static enum mk_status mk_tok_reserve_syms(struct mk_tok_work *w, size_t n) {
    if (n <= w->sym_cap) return MK_OK;
    if (n > SIZE_MAX / sizeof *w->syms) return MK_ERR_NOMEM;
    struct mk_tok_sym *s = realloc(w->syms, n * sizeof *s);
    if (!s) return MK_ERR_NOMEM;
    w->syms = s;
    w->sym_cap = n;
    return MK_OK;
}

/* Candidate merge of symbols left and right of str, when their concatenation is a token (SPM)
 * or a listed merge (BPE). */
static enum mk_status mk_tok_try_bigram(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str,
                                        ptrdiff_t left, ptrdiff_t right) {
    if (left < 0 || right < 0) return MK_OK;
    const struct mk_tok_sym *l = &w->syms[left], *r = &w->syms[right];
    struct mk_tok_bigram b = { .left = left, .right = right, .size = l->n + r->n };
    if (t->kind == MK_TOK_SPM) {
        int32_t id = mk_tok_find(t, str + l->off, b.size);
        if (id < 0) return MK_OK;
        b.key = t->scores[id];
    } else {
        int64_t rank = mk_tok_find_merge(t, str + l->off, l->n, str + r->off, r->n);
        if (rank < 0) return MK_OK;
        b.key = -(double)rank;
    }
    return mk_tok_heap_push(w, b);
}

/* Merges the nsym symbols already in w->syms (chained in order) over str until no candidate is
 * left. A queued pair is stale once either side has changed, which shows in its size. */
static enum mk_status mk_tok_merge_all(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str,
                                       size_t nsym) {
    enum mk_status st;
    w->heap_n = 0;
    for (size_t i = 1; i < nsym; i++)
        if ((st = mk_tok_try_bigram(t, w, str, (ptrdiff_t)i - 1, (ptrdiff_t)i)) != MK_OK) return st;
    while (w->heap_n > 0) {
        struct mk_tok_bigram b = mk_tok_heap_pop(w);
        struct mk_tok_sym *l = &w->syms[b.left], *r = &w->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = b.left;
        if ((st = mk_tok_try_bigram(t, w, str, l->prev, b.left)) != MK_OK ||
            (st = mk_tok_try_bigram(t, w, str, b.left, l->next)) != MK_OK)
            return st;
    }
    return MK_OK;
}

static void mk_tok_link(struct mk_tok_work *w, size_t nsym) {
    for (size_t i = 0; i < nsym; i++) {
        w->syms[i].prev = (ptrdiff_t)i - 1;
        w->syms[i].next = i + 1 < nsym ? (ptrdiff_t)i + 1 : -1;
    }
}

/* SPM over one escaped fragment: UTF-8 characters (an invalid byte on its own), merged by score,
 * then pieces that are not tokens fall back to byte tokens. */
static enum mk_status mk_tok_spm(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str, size_t n,
                                 struct mk_tok_out *o) {
    enum mk_status st;
    if (n == 0) return MK_OK;
    if ((st = mk_tok_reserve_syms(w, n)) != MK_OK) return st;
    size_t nsym = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cpt;
        size_t len = mk_tok_utf8_decode((const unsigned char *)str + off, n - off, &cpt);
        if (len == 0) len = 1;
        w->syms[nsym].off = off;
        w->syms[nsym].n = len;
        nsym++;
        off += len;
    }
    mk_tok_link(w, nsym);
    if ((st = mk_tok_merge_all(t, w, str, nsym)) != MK_OK) return st;
    for (ptrdiff_t i = 0; i >= 0; i = w->syms[i].next) {
        const struct mk_tok_sym *s = &w->syms[i];
        int32_t id = mk_tok_find(t, str + s->off, s->n);
        if (id >= 0) {
            mk_tok_emit(o, id);
            continue;
        }
        for (size_t j = 0; j < s->n; j++) {
            int32_t b = t->byte_token[(unsigned char)str[s->off + j]];
            if (b >= 0)
                mk_tok_emit(o, b);
            else if (t->unk >= 0)
                mk_tok_emit(o, t->unk);
        }
    }
    return MK_OK;
}

/* One pre-tokenized word of BPE: each byte becomes its mapped character, then merges by rank. */
static enum mk_status mk_tok_bpe_word(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *word, size_t n,
                                      char *enc, struct mk_tok_out *o) {
    enum mk_status st;
    size_t elen = 0;
    for (size_t i = 0; i < n; i++) {
        w->syms[i].off = elen;
        w->syms[i].n = mk_tok_utf8_encode(t->byte_to_cpt[(unsigned char)word[i]], enc + elen);
        elen += w->syms[i].n;
    }
    mk_tok_link(w, n);
    if ((st = mk_tok_merge_all(t, w, enc, n)) != MK_OK) return st;
    for (ptrdiff_t i = 0; i >= 0; i = w->syms[i].next) {
        const struct mk_tok_sym *s = &w->syms[i];
        int32_t id = mk_tok_find(t, enc + s->off, s->n);
        if (id >= 0) {
            mk_tok_emit(o, id);
            continue;
        }
        /* As llama.cpp: try each byte of the mapped text alone. */
        for (size_t j = 0; j < s->n; j++) {
            int32_t b = mk_tok_find(t, enc + s->off + j, 1);
            if (b >= 0) mk_tok_emit(o, b);
        }
    }
    return MK_OK;
}

/* The GPT-2 pre-tokenizer regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * over ncp codepoints, written out by hand as llama.cpp does. Stores each word's end (a
 * codepoint index) in ends and returns the word count. */
static size_t mk_tok_gpt2_split(const uint32_t *cpt, const uint8_t *fl, size_t ncp, size_t *ends) {
#define MK_TOK_FL(i) ((i) < ncp ? fl[i] : 0)
    size_t nw = 0, pos = 0;
    const uint8_t LNS = MK_CPT_LETTER | MK_CPT_NUMBER | MK_CPT_SPACE;
    while (pos < ncp) {
        uint32_t c = cpt[pos];
        if (c == '\'' && pos + 1 < ncp) {
            uint32_t c1 = cpt[pos + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                ends[nw++] = pos;
                continue;
            }
            if (pos + 2 < ncp) {
                uint32_t c2 = cpt[pos + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    ends[nw++] = pos;
                    continue;
                }
            }
        }
        uint8_t f2 = c == ' ' ? MK_TOK_FL(pos + 1) : fl[pos];
        if (f2 & MK_CPT_LETTER) {
            pos += c == ' ';
            while (MK_TOK_FL(pos) & MK_CPT_LETTER) pos++;
            ends[nw++] = pos;
            continue;
        }
        if (f2 & MK_CPT_NUMBER) {
            pos += c == ' ';
            while (MK_TOK_FL(pos) & MK_CPT_NUMBER) pos++;
            ends[nw++] = pos;
            continue;
        }
        if (!(f2 & LNS) && f2) {
            pos += c == ' ';
            while (!(MK_TOK_FL(pos) & LNS) && MK_TOK_FL(pos)) pos++;
            ends[nw++] = pos;
            continue;
        }
        size_t nws = 0;
        while (MK_TOK_FL(pos + nws) & MK_CPT_SPACE) nws++;
        if (nws > 1 && pos + nws < ncp)
            pos += nws - 1; /* \s+(?!\S): leave the last space to the word after it */
        else if (nws > 0)
            pos += nws;
        else
            pos++;
        ends[nw++] = pos;
    }
    return nw;
#undef MK_TOK_FL
}

static enum mk_status mk_tok_bpe(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str, size_t n,
                                 struct mk_tok_out *o) {
    enum mk_status st = MK_OK;
    if (n == 0) return MK_OK;
    if (n > SIZE_MAX / 32) return MK_ERR_NOMEM;
    uint32_t *cpt = malloc(n * sizeof *cpt);         /* (ncp) */
    uint8_t *fl = malloc(n);                         /* (ncp) class flags */
    size_t *start = malloc((n + 1) * sizeof *start); /* (ncp + 1) byte offset of each codepoint */
    size_t *ends = malloc(n * sizeof *ends);         /* (words) */
    char *enc = malloc(2 * n);                       /* mapped characters of one word, 2 bytes at most each */
    if (!cpt || !fl || !start || !ends || !enc || mk_tok_reserve_syms(w, n) != MK_OK) {
        st = MK_ERR_NOMEM;
        goto done;
    }
    size_t ncp = 0;
    for (size_t off = 0; off < n;) {
        uint32_t c;
        size_t len = mk_tok_utf8_decode((const unsigned char *)str + off, n - off, &c);
        if (len == 0) {
            len = 1;
            c = MK_TOK_REPLACEMENT;
        }
        cpt[ncp] = c;
        fl[ncp] = mk_tok_cpt_flags(c);
        start[ncp] = off;
        ncp++;
        off += len;
    }
    start[ncp] = n;
    size_t nw = mk_tok_gpt2_split(cpt, fl, ncp, ends);
    size_t from = 0;
    for (size_t i = 0; i < nw; i++) {
        size_t b0 = start[from], b1 = start[ends[i]];
        if ((st = mk_tok_bpe_word(t, w, str + b0, b1 - b0, enc, o)) != MK_OK) goto done;
        from = ends[i];
    }
done:
    free(cpt);
    free(fl);
    free(start);
    free(ends);
    free(enc);
    return st;
}

/* A piece of the input: raw text [off, off + len), or a special token (id >= 0). */
struct mk_tok_frag {
    size_t off, len;
    int32_t id;
};

struct mk_tok_frags {
    struct mk_tok_frag *a;
    size_t n, cap;
};

static enum mk_status mk_tok_frag_add(struct mk_tok_frags *f, size_t off, size_t len, int32_t id) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct mk_tok_frag *a = realloc(f->a, cap * sizeof *a);
        if (!a) return MK_ERR_NOMEM;
        f->a = a;
        f->cap = cap;
    }
    f->a[f->n++] = (struct mk_tok_frag){ off, len, id };
    return MK_OK;
}

/* Cuts every occurrence of the special tokens (longest first, each left to right) out of the raw
 * fragments, as llama.cpp's tokenizer_st_partition does. User-defined tokens are always cut;
 * control and unknown ones only when parse_special. */
static enum mk_status mk_tok_partition(const struct mk_tokenizer *t, const char *text, size_t len, bool parse_special,
                                       struct mk_tok_frags *f) {
    enum mk_status st;
    struct mk_tok_frags next = { 0 };
    if (len == 0) return MK_OK;
    if ((st = mk_tok_frag_add(f, 0, len, -1)) != MK_OK) return st;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && t->types[id] != MK_TOK_USER_DEFINED) continue;
        const char *sp = mk_tok_text(t, id);
        size_t sn = t->text_len[id];
        bool found = false;
        for (size_t i = 0; i < f->n && !found; i++)
            found = f->a[i].id < 0 && memmem(text + f->a[i].off, f->a[i].len, sp, sn) != NULL;
        if (!found) continue;
        next.n = 0;
        for (size_t i = 0; i < f->n; i++) {
            struct mk_tok_frag fr = f->a[i];
            if (fr.id >= 0) {
                if ((st = mk_tok_frag_add(&next, fr.off, fr.len, fr.id)) != MK_OK) goto fail;
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            while (pos < end) {
                const char *m = memmem(text + pos, end - pos, sp, sn);
                if (!m) break;
                size_t at = (size_t)(m - text);
                if (at > pos && (st = mk_tok_frag_add(&next, pos, at - pos, -1)) != MK_OK) goto fail;
                if ((st = mk_tok_frag_add(&next, at, sn, id)) != MK_OK) goto fail;
                pos = at + sn;
            }
            if (pos < end && (st = mk_tok_frag_add(&next, pos, end - pos, -1)) != MK_OK) goto fail;
        }
        struct mk_tok_frags tmp = *f;
        *f = next;
        next = tmp;
    }
    free(next.a);
    return MK_OK;
fail:
    free(next.a);
    return st;
}

int64_t mk_tokenizer_encode(const struct mk_tokenizer *t, const char *text, size_t len, bool add_bos,
                            bool parse_special, int32_t *ids, size_t cap) {
    if (!t || (!text && len > 0) || (!ids && cap > 0)) return MK_ERR_INVALID_ARG;
    if (len > SIZE_MAX / 64) return MK_ERR_NOMEM;
    enum mk_status st = MK_OK;
    struct mk_tok_out o = { ids, cap, 0 };
    struct mk_tok_frags f = { 0 };
    struct mk_tok_work w = { 0 };
    char *esc = NULL;
    if (add_bos && t->bos >= 0) mk_tok_emit(&o, t->bos);
    if ((st = mk_tok_partition(t, text, len, parse_special, &f)) != MK_OK) goto done;
    if (t->kind == MK_TOK_SPM) {
        /* Escaped text: a space grows to U+2581 (3 bytes), plus the dummy-prefix space. */
        esc = malloc(3 * len + 3);
        if (!esc) {
            st = MK_ERR_NOMEM;
            goto done;
        }
    }
    bool prev_special = true; /* SPM: the text after the start or a special token gets the dummy prefix */
    for (size_t i = 0; i < f.n; i++) {
        const struct mk_tok_frag *fr = &f.a[i];
        if (fr->id >= 0) {
            mk_tok_emit(&o, fr->id);
            prev_special = true;
            continue;
        }
        if (t->kind == MK_TOK_BPE) {
            if ((st = mk_tok_bpe(t, &w, text + fr->off, fr->len, &o)) != MK_OK) goto done;
            continue;
        }
        size_t n = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(esc, "\xe2\x96\x81", 3);
            n = 3;
        }
        for (size_t j = 0; j < fr->len; j++) {
            char c = text[fr->off + j];
            if (c == ' ') {
                memcpy(esc + n, "\xe2\x96\x81", 3);
                n += 3;
            } else {
                esc[n++] = c;
            }
        }
        prev_special = false;
        if ((st = mk_tok_spm(t, &w, esc, n, &o)) != MK_OK) goto done;
    }
done:
    free(esc);
    free(f.a);
    free(w.syms);
    free(w.heap);
    if (st != MK_OK) return st;
    return o.n > (size_t)INT64_MAX ? MK_ERR_INTERNAL : (int64_t)o.n;
}

/* ---- Decoding ---- */

/* Output bytes, counted past cap; strip drops one leading space of the piece. */
struct mk_tok_sink {
    char *out;
    size_t cap;
    size_t n;
    bool strip;
};

static void mk_tok_put(struct mk_tok_sink *k, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (k->strip) {
            k->strip = false;
            if (b[i] == ' ') continue;
        }
        if (k->n < k->cap) k->out[k->n] = b[i];
        k->n++;
    }
}

static int mk_tok_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static void mk_tok_piece(const struct mk_tokenizer *t, int32_t prev_id, int32_t id, struct mk_tok_sink *k) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return;
    const char *s = mk_tok_text(t, id);
    size_t n = t->text_len[id];
    int32_t ty = t->types[id];
    if (ty == MK_TOK_CONTROL || ty == MK_TOK_UNKNOWN || ty == MK_TOK_UNUSED) return;
    /* The encoder put a dummy-prefix space before the text after the start (or BOS). */
    k->strip = t->kind == MK_TOK_SPM && t->add_space_prefix && (prev_id < 0 || prev_id == t->bos);
    if (ty == MK_TOK_USER_DEFINED) {
        mk_tok_put(k, s, n);
    } else if (t->kind == MK_TOK_SPM) {
        if (ty == MK_TOK_BYTE && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && mk_tok_hex(s[3]) >= 0 &&
            mk_tok_hex(s[4]) >= 0) {
            char b = (char)(mk_tok_hex(s[3]) * 16 + mk_tok_hex(s[4]));
            mk_tok_put(k, &b, 1);
        } else {
            for (size_t i = 0; i < n;) {
                if (n - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    mk_tok_put(k, " ", 1);
                    i += 3;
                } else {
                    mk_tok_put(k, s + i, 1);
                    i++;
                }
            }
        }
    } else {
        for (size_t i = 0; i < n;) {
            uint32_t c;
            size_t len = mk_tok_utf8_decode((const unsigned char *)s + i, n - i, &c);
            if (len == 0) {
                mk_tok_put(k, s + i, 1);
                i++;
                continue;
            }
            if (c < 512 && t->cpt_to_byte[c] >= 0) {
                char b = (char)t->cpt_to_byte[c];
                mk_tok_put(k, &b, 1);
            } else {
                mk_tok_put(k, s + i, len);
            }
            i += len;
        }
    }
    k->strip = false;
}

size_t mk_tokenizer_piece(const struct mk_tokenizer *t, int32_t prev_id, int32_t id, char *out, size_t cap) {
    struct mk_tok_sink k = { out, out ? cap : 0, 0, false };
    if (!t) return 0;
    mk_tok_piece(t, prev_id, id, &k);
    return k.n;
}

size_t mk_tokenizer_decode(const struct mk_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap) {
    struct mk_tok_sink k = { out, out ? cap : 0, 0, false };
    if (!t || !ids) return 0;
    for (size_t i = 0; i < n; i++) mk_tok_piece(t, i > 0 ? ids[i - 1] : -1, ids[i], &k);
    return k.n;
}
