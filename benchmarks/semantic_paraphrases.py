"""A paraphrase-heavy recall set: details a caller said in a voice call, and a later question
about each in other words (no content word in common, checked by
``benchmarks/semantic_models.py`` with recall's own stemming), among lines of the same calls
that answer nothing asked.

Written for this measurement (issue 20, item 2); never taken from a benchmark. Two halves:

* ``TUNE``: the only pairs used to choose a model's ``min_similarity`` and the fusion;
* ``HELD_OUT``: never looked at while choosing; the figures reported are on this half.

Each pair is ``(detail, question)``; ``DISTRACTORS`` are other lines of the same kinds of call.
"""

from __future__ import annotations

#: Tuning half: choose thresholds here only.
TUNE: list[tuple[str, str]] = [
    (
        "My daughter Ines starts at Colegio Rosal in September.",
        "Which school will my kid be going to?",
    ),
    (
        "I'm allergic to penicillin, it gives me hives.",
        "Is there any medication I react badly to?",
    ),
    (
        "We're flying out of Lisbon on the 14th, the early departure.",
        "What day does our plane leave?",
    ),
    (
        "The dent is on the rear bumper, driver side, from the parking garage.",
        "Where exactly was the car damaged?",
    ),
    (
        "Our cat Miso needs her kidney diet food, the renal formula.",
        "What special meals does my pet eat?",
    ),
    (
        "I work nights at the hospital, so mornings are when I sleep.",
        "When is a bad time to phone me?",
    ),
    (
        "The charge was 89 euros from a streaming service I cancelled in March.",
        "Which payment on my account did I dispute?",
    ),
    (
        "My son struggles with fractions, especially dividing them.",
        "What math topic does the boy find hard?",
    ),
    (
        "We booked the cottage by the lake for the whole second week of August.",
        "Where are we staying on vacation this summer?",
    ),
    (
        "I take metformin twice a day with meals.",
        "What pills am I on for my diabetes?",
    ),
    (
        "The leak started under the kitchen sink after the plumber left.",
        "Where did water begin dripping in our house?",
    ),
    (
        "My wife is vegetarian, so no meat at the anniversary dinner.",
        "Does my spouse have any food restrictions?",
    ),
    (
        "I lost my wallet on the tram near Central Station on Friday.",
        "Where did I misplace my purse with the cards?",
    ),
    (
        "Grandma moves into the assisted living home next month.",
        "Where is my grandmother relocating soon?",
    ),
    (
        "The landlord promised to repaint the hallway before we move in.",
        "What did the property owner agree to fix?",
    ),
    (
        "My knee surgery is scheduled with Dr. Alvarez at Saint Mary's.",
        "Which doctor is operating on my leg?",
    ),
    (
        "I'd rather sit by the window, I get queasy in the middle.",
        "What seat do I prefer on planes?",
    ),
    (
        "We adopted a beagle puppy last weekend and named him Toby.",
        "What is the new dog called?",
    ),
    (
        "The insurance adjuster said the hail claim would take three weeks.",
        "How long until the storm damage payout is settled?",
    ),
    (
        "I teach piano lessons from home on Tuesdays and Thursdays.",
        "What do I do for work?",
    ),
    (
        "Our flight got rerouted through Frankfurt because of the strike.",
        "Why did we change planes in Germany?",
    ),
    (
        "My mortgage payment goes out on the first of every month.",
        "When is the home loan debited?",
    ),
    (
        "She has a peanut allergy, so the birthday cake must be nut free.",
        "Can the girl eat anything with groundnuts?",
    ),
    (
        "I prefer texts to calls because I'm hard of hearing.",
        "How should you contact me?",
    ),
]

#: Held-out half: the figures reported; never used to choose anything.
HELD_OUT: list[tuple[str, str]] = [
    (
        "My husband Tomas is diabetic and carries insulin everywhere.",
        "Does my partner have a medical condition?",
    ),
    (
        "The rental car is a blue hatchback we pick up at the airport counter.",
        "What vehicle are we driving on the trip?",
    ),
    (
        "I was born in Porto but grew up in Toronto.",
        "Which city am I originally from?",
    ),
    (
        "Our twins start kindergarten next fall.",
        "When do the children begin school?",
    ),
    (
        "The bank froze my card after a purchase in Singapore I never made.",
        "Why is my plastic not working in shops?",
    ),
    (
        "Every Sunday I visit my mother at the care facility.",
        "How often do I see mom?",
    ),
    (
        "The boiler makes a loud banging noise when the heating comes on.",
        "What is wrong with the furnace?",
    ),
    (
        "My physiotherapist told me to swim instead of jogging for now.",
        "Which exercise was I advised to do?",
    ),
    (
        "We're celebrating our 25th wedding anniversary in Kyoto.",
        "Where are we going for the silver jubilee?",
    ),
    (
        "My daughter is learning the violin and practices an hour daily.",
        "What instrument does the girl play?",
    ),
    (
        "I'm moving from Denver to Austin for a new job in June.",
        "Which city am I relocating to?",
    ),
    (
        "The tow truck dropped the car at Mike's garage on Elm Street.",
        "Where is my automobile being repaired?",
    ),
    (
        "My blood pressure has been high since I switched medication.",
        "Is anything worrying about my health readings?",
    ),
    (
        "We want a hotel room with two double beds for the kids.",
        "What sleeping arrangements do we need?",
    ),
    (
        "I'm scared of heights, so no balcony rooms please.",
        "Do I have any phobias you should know about?",
    ),
    (
        "My brother Luca is getting married in Naples in October.",
        "Whose wedding am I attending abroad this autumn?",
    ),
    (
        "The parcel was left with the neighbour at number 12.",
        "Who has my package?",
    ),
    (
        "I paid the deposit by bank transfer last Thursday.",
        "How did I settle the down payment?",
    ),
    (
        "My son wants to study marine biology at university.",
        "What does the boy hope to major in?",
    ),
    (
        "The pharmacy ran out of my asthma inhaler again.",
        "What prescription couldn't I get filled?",
    ),
    (
        "I broke my wrist skiing in the Alps last winter.",
        "How did I injure my arm?",
    ),
    (
        "Our dog gets carsick, so we can't drive more than an hour.",
        "Why are long road trips a problem?",
    ),
    (
        "The tutor comes on Wednesday afternoons to help with chemistry.",
        "When are the science lessons?",
    ),
    (
        "We're hoping for a refund because the flight was cancelled.",
        "Why do we expect money back from the airline?",
    ),
]

#: Other lines of the same kinds of call: they answer none of the questions.
DISTRACTORS: list[str] = [
    "Hi, thanks for calling, how can I help you today?",
    "Could you spell your last name for me please?",
    "Let me pull up your account, one moment.",
    "Sorry, the line is a bit noisy, can you repeat that?",
    "I'll put a note on the file so the next agent sees it.",
    "Is this still the best number to reach you on?",
    "Great, I've confirmed your email address.",
    "You should get a confirmation message within the hour.",
    "Our office is open until six on weekdays.",
    "The reference number is seven four two nine.",
    "Thanks for waiting, I appreciate your patience.",
    "Do you have any other questions for me today?",
    "Have a lovely evening, goodbye.",
    "I can transfer you to billing if you like.",
    "We had a heavy week at work, lots of deadlines.",
    "The weather has been awful, rain every single day.",
    "I watched a documentary about octopuses last night.",
    "My neighbour plays loud music on Saturdays.",
    "The coffee machine at the office broke again.",
    "I'm trying to read more books this year.",
    "Traffic on the ring road was terrible this morning.",
    "We repainted the fence green last spring.",
    "The football match went to penalties, what a game.",
    "I've been learning to bake sourdough bread.",
    "My phone battery dies by lunchtime these days.",
    "The supermarket moved all the aisles around.",
    "We need to renew the car registration soon.",
    "I forgot my umbrella at the restaurant.",
    "The printer keeps jamming on double-sided pages.",
    "I started a pottery class with a friend.",
    "The bus was twenty minutes late again.",
    "I prefer my tea with lemon, not milk.",
    "We're redoing the garden with native plants.",
    "My laptop needs a new keyboard.",
    "The museum has a new exhibition on maps.",
    "I signed up for a half marathon in the spring.",
    "Our building's elevator is out of service.",
    "I'm saving up for a new sofa.",
    "The internet was down for two hours yesterday.",
    "We finally finished assembling the bookshelf.",
    "The invoice lists the amount due and the due date.",
    "Please keep your receipt in case you need a return.",
    "Your appointment reminder goes out a day before.",
    "The form needs a signature on page two.",
    "We accept cash, card and bank transfer.",
    "The waiting list is about four weeks at the moment.",
    "You can change your password in the app settings.",
    "The technician will call half an hour before arriving.",
    "There's a small fee for paper statements.",
    "Parking is free after seven in the evening.",
    "The gym downstairs opens at six in the morning.",
    "Breakfast is served until half past ten.",
    "Check-out is at eleven, late check-out costs extra.",
    "The museum pass includes the river cruise.",
    "Your loyalty points expire at the end of the year.",
    "The clinic moved to the second floor.",
    "Bring your ID and your insurance card to the visit.",
    "Fasting is needed for eight hours before the test.",
    "The survey takes about five minutes.",
    "We'll send the quote by email tomorrow.",
    "The warranty covers parts for two years.",
    "Our team is short-staffed this week, sorry for the delay.",
    "I can offer a ten percent discount on the next order.",
    "The system update will finish overnight.",
    "Let me check whether that item is in stock.",
    "The new timetable starts on Monday.",
    "You'll need to reset the router after the update.",
    "We close early on public holidays.",
    "The lecture was recorded, you can watch it later.",
    "Homework is due before the end of the week.",
    "The exam results come out in July.",
    "The library extended its opening hours.",
    "The plumber charges a call-out fee.",
    "The roof inspection is booked for next Tuesday.",
    "I've attached the photos of the living room.",
    "The electricity meter reading was taken last month.",
    "The gas supplier changed their tariff.",
    "I'd like to update my postal address.",
    "Could you send me a copy of the contract?",
    "I usually walk to work when it's sunny.",
    "We celebrated my niece's graduation last week.",
    "I'm thinking about getting a bicycle.",
    "The concert tickets sold out in minutes.",
    "We ordered pizza and watched a film.",
    "My colleague recommended a good dentist.",
    "The hotel pool was closed for cleaning.",
    "I'm not a big fan of spicy food.",
    "The train to the coast takes three hours.",
    "We visited the botanical gardens on Sunday.",
    "I've got a dentist check-up in the spring.",
]

__all__ = ["DISTRACTORS", "HELD_OUT", "TUNE"]
